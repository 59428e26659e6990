"""``runjobs --reload`` with real processes: when a Python file of the project changes, the
supervisor starts new worker processes, which import the new code, and the old ones finish.

The project is a directory of the test's own (the test settings plus an app whose ``jobs.py``
the test edits), and runjobs runs in it: the supervisor watches the imported Python files under
its current directory. The test waits on the processes and the database, never on time; the
edited file's modification time is moved on explicitly, so that neither the supervisor's look
nor Python's bytecode cache (which compares whole seconds and the size, the same here) can miss
the change.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_jobs import job
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from tests.integration.test_supervisor_processes import alive, refreshed
from tests.integration.test_worker_processes import terminate, wait_for

pytestmark = [pytest.mark.process, pytest.mark.engine]

KIND = "reload.version"
JOBS_PY = """import os

from django_jobs import job


@job("reload.version", idempotency_key="payload")
def version(ctx):
    return {"version": VERSION, "pid": os.getpid()}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory: settings that add the ``reloaded`` app to the test settings, and
    the app's ``jobs.py`` at version 1."""
    root = tmp_path / "project"
    (root / "reloaded").mkdir(parents=True)
    (root / "reload_settings.py").write_text(
        "from testproject.settings import *  # noqa: F403\n\n"
        'INSTALLED_APPS = [*INSTALLED_APPS, "reloaded"]  # noqa: F405\n'
    )
    (root / "reloaded" / "__init__.py").write_text("")
    (root / "reloaded" / "jobs.py").write_text(JOBS_PY.replace("VERSION", "1"))
    return root


@pytest.fixture
def version_kind() -> Iterator:
    """The kind in this process, to enqueue it; the workers run the project's code."""
    handle = job(KIND, idempotency_key="payload")(lambda ctx: None)
    try:
        yield handle
    finally:
        unregister(KIND)


def test_reload_starts_new_worker_processes_with_the_changed_code(
    spawn, project: Path, version_kind
):
    env = {
        "DJANGO_SETTINGS_MODULE": "reload_settings",
        "PYTHONPATH": os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]),
    }
    worker = spawn("runjobs", "--reload", "--no-scheduler", env=env, cwd=project)

    first = version_kind.enqueue({"n": 1})
    wait_for(lambda: refreshed(first).state == "succeeded", "the first job ran", worker)
    assert first.result["version"] == 1
    old_pid = first.result["pid"]

    jobs_py = project / "reloaded" / "jobs.py"
    before = jobs_py.stat()
    jobs_py.write_text(JOBS_PY.replace("VERSION", "2"))
    os.utime(jobs_py, ns=(before.st_atime_ns, before.st_mtime_ns + 10 * 10**9))

    worker.wait_for_output("Python files changed: starting new worker processes.")
    # The old worker process finishes once the new one is ready: from then on, only the new
    # code can claim the next job.
    wait_for(lambda: not alive(old_pid), "the old worker process stopped", worker)
    second = version_kind.enqueue({"n": 2})
    wait_for(lambda: refreshed(second).state == "succeeded", "the second job ran", worker)
    assert second.result["version"] == 2
    assert second.result["pid"] != old_pid

    # One supervisor all along: the process started, still up, and ready only once.
    output = worker.output()
    assert worker.popen.poll() is None
    assert output.count("runjobs: supervisor ") == 1
    assert f"(pid {worker.popen.pid}) ready" in output
    assert output.count("Python files changed: starting new worker processes.") == 1
    assert output.count("runjobs: worker ") == 2  # the first worker process, then the new one
    assert Job.objects.filter(kind=KIND, state="succeeded").count() == 2
    assert terminate(worker) == 0
