"""Real ``manage.py runjobs`` processes against the test database, PostgreSQL and SQLite.

The jobs write ``Execution`` rows (``testproject.jobs``), so the tests count what really ran,
in which process. Subprocesses read the real clock: these tests wait on the other process
(``wait_until``), never on time, and never move the clock.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone

import django_jobs
from django_jobs.models import Job
from testproject.jobs import keeps_requeueing, record, slow
from testproject.models import Execution
from tests.conftest import on_postgres, someone_listens, wait_until

pytestmark = pytest.mark.process

SHORT_LEASE = {"JOBS_LEASE": "2s"}


class Rollback(Exception):
    """Raised to roll back a test's ``transaction.atomic()`` block."""


def states(ids: list[int] | None = None) -> dict[str, int]:
    jobs = Job.objects.all() if ids is None else Job.objects.filter(pk__in=ids)
    return dict(Counter(jobs.values_list("state", flat=True)))


def labels(job_id: int) -> Counter[str]:
    return Counter(Execution.objects.filter(job_id=job_id).values_list("label", flat=True))


def job_state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def exit_code(proc, timeout: float = 60) -> int:
    """Wait for ``proc`` to exit; if it does not, fail with its output."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s:\n{proc.output()}") from None


def terminate(proc, timeout: float = 30) -> int:
    """SIGTERM ``proc`` and return its exit code."""
    proc.popen.send_signal(signal.SIGTERM)
    return exit_code(proc, timeout)


def wait_for(predicate, what: str, *procs, timeout: float = 30) -> None:
    """Wait for ``predicate``; if it stays false, fail with ``what`` and the processes' output."""
    try:
        wait_until(predicate, timeout=timeout)
    except AssertionError:
        outputs = "\n".join(proc.output() for proc in procs)
        raise AssertionError(f"{what} (waited {timeout}s):\n{outputs}") from None


# -- the transactional outbox and NOTIFY -----------------------------------------------------


def test_rolled_back_enqueue_never_exists_and_never_runs(spawn):
    with pytest.raises(Rollback), transaction.atomic():
        ghost = record.enqueue({"n": "rolled back"})
        assert Job.objects.filter(pk=ghost.pk).exists()  # visible inside its own transaction
        raise Rollback
    assert not Job.objects.filter(pk=ghost.pk).exists()
    kept = record.enqueue({"n": "committed"})

    worker = spawn("runjobs", "--burst", "--concurrency", "2")

    assert exit_code(worker) == 0, worker.output()
    assert states() == {"succeeded": 1}
    assert list(Execution.objects.values_list("job_id", flat=True)) == [kept.pk]


def _worker_connections_idle() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state <> 'idle'"
        )
        return cursor.fetchone()[0] == 0


@pytest.mark.postgres
def test_commit_wakes_an_idle_postgres_worker_at_once(spawn):
    if not on_postgres():
        pytest.skip("LISTEN/NOTIFY wake-ups are PostgreSQL only; SQLite workers poll")
    # A poll interval far longer than the pickup we expect: only NOTIFY can explain a quick
    # pickup.
    worker = spawn("runjobs", "--concurrency", "1", env={"JOBS_POLL_INTERVAL": "60s"})
    worker.wait_for_output("ready")
    wait_for(someone_listens, "the worker never LISTENed", worker)
    wait_for(_worker_connections_idle, "the worker's connections stay busy", worker)
    # Its LISTEN connection wakes the claim loop once when it connects; give that last empty
    # claim a moment to finish so the worker is really asleep in its 60 s poll.
    time.sleep(0.5)

    with pytest.raises(Rollback), transaction.atomic():
        record.enqueue({"n": "rolled back"})
        raise Rollback
    began = time.monotonic()
    job = record.enqueue({"n": "committed"})  # its own transaction: commits and notifies

    wait_for(lambda: job_state(job) != "queued", "the idle worker did not wake", worker, timeout=5)
    assert time.monotonic() - began < 5
    wait_for(lambda: job_state(job) == "succeeded", "the job did not succeed", worker)
    assert job.started_at - job.created_at < timedelta(seconds=5)
    assert states() == {"succeeded": 1}
    assert list(Execution.objects.values_list("job_id", flat=True)) == [job.pk]

    assert terminate(worker) == 0, worker.output()


# -- waiting jobs hold no slot ---------------------------------------------------------------


def test_a_requeueing_job_does_not_block_the_jobs_behind_it(spawn):
    canary = keeps_requeueing.enqueue({"n": "canary"})
    behind = record.enqueue_many([{"n": n} for n in range(50)])
    behind_ids = [j.pk for j in behind]

    first = spawn("runjobs", "--burst", "--concurrency", "1")

    assert exit_code(first, 60) == 0, first.output()
    assert states(behind_ids) == {"succeeded": 50}
    assert Execution.objects.order_by("id").first().job_id == canary.pk  # it ran first
    canary.refresh_from_db()
    assert canary.state == "waiting"
    assert canary.wait_reason == "waiting for the warehouse"
    assert canary.attempts == 1
    assert canary.run_at > timezone.now() + timedelta(minutes=55)  # re-asked in an hour
    assert labels(canary.pk) == {"requeue": 1}

    assert django_jobs.wake_waiting() == 1
    second = spawn("runjobs", "--burst", "--concurrency", "1")

    assert exit_code(second, 60) == 0, second.output()
    assert labels(canary.pk) == {"requeue": 2}
    canary.refresh_from_db()
    assert (canary.state, canary.attempts) == ("waiting", 1)
    assert states(behind_ids) == {"succeeded": 50}


def test_cancelling_a_waiting_job_disarms_its_reask(spawn):
    waiting = keeps_requeueing.enqueue({"n": "cancel me"})
    first = spawn("runjobs", "--burst", "--concurrency", "1")
    assert exit_code(first) == 0, first.output()
    assert job_state(waiting) == "waiting"

    # The worker reads the real clock, which this test cannot move. Moving the re-ask time into
    # the past instead makes the job due now, as if its hour had passed.
    Job.objects.filter(pk=waiting.pk).update(run_at=timezone.now() - timedelta(hours=2))
    assert django_jobs.cancel(waiting.pk)["state"] == "cancelled"
    waiting.refresh_from_db()
    assert waiting.state == "cancelled"
    assert waiting.ended_at is not None
    assert waiting.wait_reason is None

    assert django_jobs.wake_waiting() == 0
    other = record.enqueue({"n": "proves the worker claims"})
    second = spawn("runjobs", "--burst", "--concurrency", "1")

    assert exit_code(second) == 0, second.output()
    assert job_state(other) == "succeeded"
    assert labels(waiting.pk) == {"requeue": 1}
    assert job_state(waiting) == "cancelled"


# -- many workers ----------------------------------------------------------------------------


def test_three_workers_run_every_job_exactly_once(spawn):
    workers = [spawn("runjobs", "--concurrency", "4") for _ in range(3)]
    for worker in workers:
        worker.wait_for_output("ready")
    ids = [j.pk for j in record.enqueue_many([{"n": n} for n in range(3000)])]
    assert len(set(ids)) == 3000

    # Usually 10-30 s; the generous timeout is for a loaded machine.
    wait_for(
        lambda: Job.objects.filter(state="succeeded").count() == 3000,
        "not all 3,000 jobs succeeded",
        *workers,
        timeout=120,
    )
    for worker in workers:
        worker.popen.send_signal(signal.SIGTERM)
    for worker in workers:
        assert exit_code(worker, 30) == 0, worker.output()

    assert states() == {"succeeded": 3000}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    runs = list(Execution.objects.values_list("job_id", "pid"))
    assert len(runs) == 3000
    assert sorted(job_id for job_id, _ in runs) == sorted(ids)
    assert len({pid for _, pid in runs}) >= 2, Counter(pid for _, pid in runs)


# -- crashes and signals ---------------------------------------------------------------------


def _started(job: Job, count: int = 1) -> bool:
    return labels(job.pk)["slow-start"] >= count


@pytest.mark.engine
def test_a_killed_workers_job_is_rerun_after_its_lease(spawn, tmp_path: Path):
    marker = tmp_path / "go"
    job = slow.enqueue({"until": str(marker), "seconds": 30})
    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_for(lambda: _started(job), "the slow job did not start", first)

    first.popen.send_signal(signal.SIGKILL)
    assert exit_code(first, 10) == -signal.SIGKILL
    marker.touch()  # the re-run ends at once
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("running", 1)
    lease_end = job.leased_until  # the dead worker's last heartbeat, never extended again

    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_for(lambda: job_state(job) == "succeeded", "the job was not re-run", second)

    assert job.attempts == 2
    assert job.started_at >= lease_end  # re-asked only once the lease ran out
    assert labels(job.pk) == {"slow-start": 2, "slow-end": 1}
    assert terminate(second) == 0, second.output()


@pytest.mark.engine
def test_sigterm_finishes_in_flight_jobs_and_claims_no_more(spawn, tmp_path: Path):
    marker = tmp_path / "go"
    slows = [slow.enqueue({"until": str(marker), "n": n}, priority=0) for n in range(2)]
    queued_ids = [j.pk for j in record.enqueue_many([{"n": n} for n in range(20)], priority=5)]
    worker = spawn("runjobs", "--concurrency", "2")
    wait_for(lambda: all(_started(j) for j in slows), "the slow jobs did not start", worker)
    prefetched = Job.objects.filter(pk__in=queued_ids, state="running").count()
    assert prefetched > 0, "the worker holds no prefetched job to hand back"

    worker.popen.send_signal(signal.SIGTERM)
    # The worker shows it took the signal by handing back what it prefetched but never started.
    wait_for(
        lambda: states(queued_ids) == {"queued": 20}, "prefetched jobs were not handed back", worker
    )
    marker.touch()

    assert exit_code(worker, 30) == 0, worker.output()
    assert states([j.pk for j in slows]) == {"succeeded": 2}
    for job in slows:
        assert labels(job.pk) == {"slow-start": 1, "slow-end": 1}
    untouched = Job.objects.filter(pk__in=queued_ids)
    assert set(untouched.values_list("state", "attempts", "worker_id", "started_at")) == {
        ("queued", 0, None, None)
    }
    assert not Execution.objects.filter(job_id__in=queued_ids).exists()


@pytest.mark.engine
def test_a_second_signal_exits_at_once_and_the_lease_returns_the_job(spawn, tmp_path: Path):
    marker = tmp_path / "go"
    job = slow.enqueue({"until": str(marker), "seconds": 30}, priority=0)
    behind = record.enqueue({"n": "behind"}, priority=5)
    worker = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_for(lambda: _started(job), "the slow job did not start", worker)
    assert job_state(behind) == "running", "the worker holds no prefetched job to hand back"

    worker.popen.send_signal(signal.SIGTERM)
    # The worker shows it took the signal by handing back the job it prefetched.
    wait_for(lambda: job_state(behind) == "queued", "the first signal was not taken", worker)
    worker.popen.send_signal(signal.SIGINT)

    assert exit_code(worker, 5) != 0, worker.output()  # the running job would take 30 s
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("running", 1)
    assert labels(job.pk) == {"slow-start": 1}
    lease_end = job.leased_until

    marker.touch()
    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_for(
        lambda: job_state(job) == "succeeded" and job_state(behind) == "succeeded",
        "the abandoned job was not re-run",
        second,
    )
    job.refresh_from_db()
    assert job.attempts == 2
    assert job.started_at >= lease_end
    assert labels(job.pk) == {"slow-start": 2, "slow-end": 1}
    assert terminate(second) == 0, second.output()
