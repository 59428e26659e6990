"""The fleet with real ``manage.py runjobs`` processes, on PostgreSQL and SQLite: a worker's row
(written at start, heartbeated, marked stopped) and paused queues (a running worker stops
starting their jobs within a second, starts them again on resume; a new worker respects a
pause made before it started). Subprocesses read the real clock: the tests wait on the other
process (``wait_for``), never on time.
"""

from __future__ import annotations

import signal
import socket
import time

import pytest
from django.db import connection

import django_jobs
from django_jobs import operations
from django_jobs.models import Job, PausedQueue
from django_jobs.models import Worker as WorkerRow
from testproject.jobs import record
from testproject.models import Execution
from tests.conftest import requires_postgres
from tests.integration.test_worker_processes import exit_code, wait_for

pytestmark = pytest.mark.process

#: A short lease: the keeper beats every third of it.
FAST_BEAT = {"JOBS_LEASE": "1s"}
PAUSE_SEEN = "Paused queues of engine default: mail."


def row(name: str) -> WorkerRow | None:
    return WorkerRow.objects.filter(name=name).first()


def state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def test_a_worker_writes_its_row_heartbeats_it_and_marks_it_stopped(spawn):
    worker = spawn(
        "runjobs",
        "--name",
        "proc-a",
        "--concurrency",
        "2",
        "--queues",
        "default,mail",
        env=FAST_BEAT,
    )
    wait_for(lambda: row("proc-a") is not None, "no worker row", worker)
    first = row("proc-a")
    assert first is not None
    assert (first.hostname, first.pid, first.engine) == (
        socket.gethostname(),
        worker.popen.pid,
        "default",
    )
    assert (first.queues, first.processes, first.concurrency) == (["default", "mail"], 1, 2)
    assert (first.state, first.version) == ("running", django_jobs.__version__)

    job = record.enqueue({"n": "counted"})
    wait_for(lambda: state(job) == "succeeded", "the job did not run", worker)
    # The heartbeat moves on and brings the count of jobs done.
    wait_for(
        lambda: (
            (r := row("proc-a")) is not None
            and r.heartbeat_at > first.heartbeat_at
            and r.jobs_done == 1
        ),
        "the row was not heartbeated",
        worker,
    )
    [listed] = operations.workers()
    assert listed["state"] == "running" and listed["name"] == "proc-a"

    worker.popen.send_signal(signal.SIGTERM)
    assert exit_code(worker) == 0, worker.output()
    stopped = row("proc-a")
    assert stopped is not None and stopped.state == "stopped" and stopped.jobs_done == 1


def test_a_paused_queue_stops_starting_within_a_second_and_resumes(spawn):
    worker = spawn(
        "runjobs", "-v", "2", "--name", "proc-p", "--concurrency", "2",
        env={"JOBS_LOG_LEVEL": "INFO"},
    )  # fmt: skip
    wait_for(lambda: row("proc-p") is not None, "no worker row", worker)
    warm = record.enqueue({"n": "warm"}, queue="mail")
    wait_for(lambda: state(warm) == "succeeded", "the worker did not run mail jobs", worker)

    began = time.monotonic()
    operations.pause_queue("mail", reason="incident")
    worker.wait_for_output(PAUSE_SEEN, timeout=10)
    heard = time.monotonic() - began
    assert heard < 1.0, f"the worker heard of the pause after {heard:.2f}s"

    held = record.enqueue({"n": "held"}, queue="mail")  # enqueue is still accepted
    assert held.state == "queued"
    after = record.enqueue({"n": "after"})
    # The worker claimed (and ran) a job enqueued after the paused one, and passed over it.
    wait_for(lambda: state(after) == "succeeded", "the default queue stopped too", worker)
    assert state(held) == "queued"
    assert not Execution.objects.filter(job_id=held.pk).exists()

    operations.resume_queue("mail")
    wait_for(lambda: state(held) == "succeeded", "the resumed queue did not run", worker)
    held.refresh_from_db()
    assert held.attempts == 1


def test_a_pause_outlives_worker_restarts(spawn):
    operations.pause_queue("mail", reason="until the fix ships")
    held = record.enqueue({"n": "held"}, queue="mail")
    other = record.enqueue({"n": "other"})

    first = spawn("runjobs", "--burst", "--name", "burst-1")
    assert exit_code(first) == 0, first.output()
    assert (state(held), state(other)) == ("queued", "succeeded")

    second = spawn("runjobs", "--burst", "--name", "burst-2")
    assert exit_code(second) == 0, second.output()
    assert state(held) == "queued"

    operations.resume_queue("mail")
    third = spawn("runjobs", "--burst", "--name", "burst-3")
    assert exit_code(third) == 0, third.output()
    assert state(held) == "succeeded"
    assert {r.name: r.state for r in WorkerRow.objects.all()} == {
        "burst-1": "stopped",
        "burst-2": "stopped",
        "burst-3": "stopped",
    }


@pytest.mark.postgres
@requires_postgres
def test_a_pause_row_written_by_sql_without_notify_is_seen_within_a_second(spawn):
    # The NOTIFY is a hint: a pause row that comes without one (written by SQL, restored from a
    # backup, on a promoted replica) holds within a second all the same.
    worker = spawn(
        "runjobs", "-v", "2", "--name", "proc-sql", "--concurrency", "2",
        env={"JOBS_LOG_LEVEL": "INFO"},
    )  # fmt: skip
    wait_for(lambda: row("proc-sql") is not None, "no worker row", worker)
    warm = record.enqueue({"n": "warm"}, queue="mail")
    wait_for(lambda: state(warm) == "succeeded", "the worker did not run mail jobs", worker)

    table = PausedQueue._meta.db_table
    began = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (engine, queue, reason, paused_at, paused_by) "
            "VALUES ('default', 'mail', 'by hand', now(), '')"
        )
    worker.wait_for_output(PAUSE_SEEN, timeout=10)
    heard = time.monotonic() - began
    assert heard < 1.0, f"the worker read the pause row after {heard:.2f}s"

    held = record.enqueue({"n": "held"}, queue="mail")  # its NOTIFY wakes the worker
    after = record.enqueue({"n": "after"})
    wait_for(lambda: state(after) == "succeeded", "the default queue stopped too", worker)
    assert state(held) == "queued"
    assert not Execution.objects.filter(job_id=held.pk).exists()

    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE engine = 'default' AND queue = 'mail'")
    wait_for(lambda: state(held) == "succeeded", "the queue resumed by SQL did not run", worker)
