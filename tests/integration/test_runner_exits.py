"""A runner that exits, or whose executor thread dies, fails its attempt; the worker goes on.

Real ``manage.py runjobs --burst`` processes, PostgreSQL and SQLite: the tests wait on the other
process, never on time.
"""

from __future__ import annotations

import subprocess

import pytest

from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.jobs import exits, interrupts, record
from testproject.models import Execution

pytestmark = [pytest.mark.process, pytest.mark.engine]


def exit_code(proc, timeout: float = 30) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s:\n{proc.output()}") from None


def labels() -> list[str]:
    return sorted(Execution.objects.values_list("label", flat=True))


def test_runner_calling_exit_fails_its_attempts_and_the_jobs_behind_it_run(spawn):
    exiting = exits.enqueue({"n": 1}, priority=-1)  # claimed first
    behind = [record.enqueue({"n": n}) for n in range(3)]

    worker = spawn("runjobs", "--burst", "--concurrency", "1")

    assert exit_code(worker) == 0, worker.output()
    exiting.refresh_from_db()
    assert exiting.state == "failed"
    assert "SystemExit: 3" in exiting.error
    assert exiting.attempts == 2  # Retry(attempts=2): the kind's policy, as for any error
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in behind]).values_list("state", flat=True)
    ) == {"succeeded"}
    assert labels() == ["exit", "exit", "record", "record", "record"]


def test_a_dead_executor_thread_is_replaced_and_its_job_is_not_left_running(spawn):
    dying = interrupts.enqueue({"n": 1}, priority=-1)
    behind = [record.enqueue({"n": n}) for n in range(3)]

    worker = spawn("runjobs", "--burst", "--concurrency", "1")

    assert exit_code(worker) == 0, worker.output()
    dying.refresh_from_db()
    assert dying.state == "failed"
    assert "KeyboardInterrupt" in dying.error
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in behind]).values_list("state", flat=True)
    ) == {"succeeded"}
    output = worker.output()
    assert "Executor thread" in output and "replaced" in output, output
    assert f"job {dying.pk}" in output


@pytest.mark.django_db
def test_exit_in_process_fails_the_attempt():
    job = exits.enqueue({"n": 2})
    ran = run_until_idle()
    assert [j.state for j in ran] == ["queued", "failed"]
    job.refresh_from_db()
    assert job.error.startswith("MAX_ATTEMPTS") and "SystemExit: 3" in job.error
