"""How ``runjobs --processes N`` starts its worker processes, with real processes: forked from a
template per generation that holds no socket; signals sent while they start (SIGHUP then
SIGUSR1 at several offsets, to the parent or to the whole group) kill none of them; a child
killed with SIGKILL just after its start is replaced at once, not after a backoff; a template
that dies is replaced; a template with a socket open at import forks nothing, and the children
start as new interpreters instead.

The subprocesses read the real clock: the tests wait on the other processes (``wait_for``),
never on time, except for the gap between two signals, which is what they are about.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from django_jobs.engine.worker.template import fork_problems
from django_jobs.models import Job
from testproject.jobs import record
from tests.integration.test_supervisor_processes import alive, refreshed
from tests.integration.test_worker_processes import terminate, wait_for

pytestmark = [pytest.mark.process, pytest.mark.engine]

READY = re.compile(r"Worker process (\d+) ready \(pid (\d+)\), (forked|started) in (\d+) ms")


def ready(worker) -> list[tuple[int, str, int]]:
    """(pid, "forked" or "started", ms) of each worker process that said it was ready."""
    return [(int(m[2]), m[3], int(m[4])) for m in READY.finditer(worker.output())]


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if parent_of(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def template_of(worker) -> int:
    (template,) = [
        pid
        for pid in children_of(worker.popen.pid)
        if b"--child-template-fd" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    return template


def sockets_of(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def runs_a_job(worker, n: object) -> None:
    job = record.enqueue({"n": n})
    wait_for(lambda: refreshed(job).state == "succeeded", f"job {n} ran", worker, timeout=60)


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@needs_proc
def test_children_are_forked_from_a_template_that_holds_no_connection(spawn):
    worker = spawn("runjobs", "--processes", "2", "--concurrency", "1", "--no-scheduler")
    wait_for(lambda: len(ready(worker)) == 2, "two worker processes ready", worker, timeout=60)
    template = template_of(worker)
    for pid, how, _ in ready(worker):
        assert how == "forked"
        assert parent_of(pid) == template  # the template's children, not new interpreters
    # Its one socket is the pair to the supervisor (stdout here is a file): no database
    # connection was left open to cross a fork.
    assert sockets_of(template) == 1
    runs_a_job(worker, "forked")
    assert terminate(worker) == 0
    assert not alive(template)  # it exits with its children


@pytest.mark.parametrize("start", ["forked", "interpreters"])
def test_signals_sent_while_children_start_kill_none(spawn, start):
    """SIGHUP, then SIGUSR1 (whose default action ends a process) a moment later, while the new
    generation starts: to the parent, which passes SIGUSR1 on, or to the whole process group
    (the template and every child too). No child dies; jobs run. ``interrupts.signals_held``
    keeps the signals pending until each process's handlers are in place."""
    env = {"JOBS_TEST_SOCKET_AT_IMPORT": "1"} if start == "interpreters" else {}
    worker = spawn("runjobs", "--processes", "2", "--concurrency", "1", "--no-scheduler", env=env)
    wait_for(lambda: len(ready(worker)) == 2, "two worker processes ready", worker, timeout=60)
    offsets = (0.3, 0.0, 0.05, 0.6, 0.3)
    for round_, offset in enumerate(offsets):
        to_group = round_ % 2 == 1

        def send(signum: int, to_group: bool = to_group) -> None:
            if to_group:
                os.killpg(worker.popen.pid, signum)
            else:
                worker.popen.send_signal(signum)

        send(signal.SIGHUP)
        time.sleep(offset)  # the gap between the two signals is the subject
        send(signal.SIGUSR1)
        wait_for(
            lambda r=round_: len(ready(worker)) == 2 * (r + 2),
            f"the generation started {offset}s before SIGUSR1 ready",
            worker,
            timeout=90,
        )
        runs_a_job(worker, f"after round {round_}")
    output = worker.output()
    assert all(how == ("forked" if start == "forked" else "started") for _, how, _ in ready(worker))
    assert "signal 10" not in output and "signal 1)" not in output, output
    assert "was killed" not in output and "before it was ready" not in output, output
    assert "most recent call first" in output  # the stacks were printed, by the living
    # A stop while a generation starts: each process stops, none is taken for a crash.
    worker.popen.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    assert terminate(worker, timeout=90) == 0
    assert "WORKER_LOST" not in worker.output()
    assert "was killed" not in worker.output()
    assert Job.objects.filter(state="succeeded").count() == len(offsets)


def test_a_child_killed_just_after_its_start_is_replaced_at_once(spawn):
    worker = spawn("runjobs", "--processes", "1", "--concurrency", "1", "--no-scheduler")
    wait_for(lambda: len(ready(worker)) == 1, "the worker process ready", worker, timeout=60)
    took = []
    for n in range(3):
        pid = ready(worker)[-1][0]
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)  # well within its first seconds
        wait_for(lambda n=n: len(ready(worker)) == n + 2, "a new worker process", worker)
        took.append(time.monotonic() - killed)
    output = worker.output()
    assert output.count("just after it started; starting another now") == 3, output
    # Before, each was taken for a failing import: 1, 2 then 4 s of backoff, before the start.
    assert "starting another in" not in output
    assert max(took) < 4, took
    runs_a_job(worker, "after the kills")
    # A signal at every start is a fault too: from the fourth in a row, backoff.
    os.kill(ready(worker)[-1][0], signal.SIGKILL)
    worker.wait_for_output("4 times in a row; starting another in 1s")
    wait_for(lambda: len(ready(worker)) == 5, "a new worker process", worker)
    assert terminate(worker) == 0


@needs_proc
def test_a_template_that_dies_is_replaced_and_its_children_finish(spawn):
    worker = spawn("runjobs", "--processes", "1", "--concurrency", "1", "--no-scheduler")
    wait_for(lambda: len(ready(worker)) == 1, "the worker process ready", worker, timeout=60)
    template, (child, _, _) = template_of(worker), ready(worker)[0]
    os.kill(template, signal.SIGKILL)
    wait_for(lambda: len(ready(worker)) == 2, "a child of a new template", worker, timeout=60)
    assert f"template (pid {template}) died (signal 9); starting another" in worker.output()
    wait_for(lambda: not alive(child), "the dead template's child exits", worker)
    assert template_of(worker) != template
    assert parent_of(ready(worker)[1][0]) == template_of(worker)
    runs_a_job(worker, "after the template died")
    assert terminate(worker) == 0
    assert "WORKER_LOST" not in worker.output()


def test_a_template_with_a_socket_open_forks_nothing(spawn):
    worker = spawn(
        "runjobs",
        "--processes",
        "1",
        "--no-scheduler",
        env={"JOBS_TEST_SOCKET_AT_IMPORT": "1"},
    )
    wait_for(lambda: len(ready(worker)) == 1, "the worker process ready", worker, timeout=60)
    assert ready(worker)[0][1] == "started"  # a new interpreter
    output = worker.output()
    assert "cannot be forked from the template" in output
    assert "sockets are open" in output
    runs_a_job(worker, "from a new interpreter")
    assert terminate(worker) == 0


@pytest.mark.django_db
def test_a_template_refuses_to_fork_with_a_database_connection_open():
    assert not Job.objects.exists()  # the connection is open now
    problems = fork_problems(keep=set())
    assert any(p.startswith("database connections are open (default") for p in problems)
