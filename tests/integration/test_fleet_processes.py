"""The fleet with real ``manage.py runjobs`` processes, on PostgreSQL and SQLite: a worker's row
(written at start, heartbeated, marked stopped) and paused queues (a running worker stops
starting their jobs within a second, starts them again on resume; a new worker respects a
pause made before it started). Subprocesses read the real clock: the tests wait on the other
process (``wait_for``), never on time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

import django_jobs
from django_jobs import operations
from django_jobs.models import Job, PausedQueue, worker_pid
from django_jobs.models import Worker as WorkerRow
from testproject.jobs import record, slow
from testproject.models import Execution
from tests.conftest import requires_postgres
from tests.integration.test_supervisor_processes import alive, started_pids
from tests.integration.test_worker_processes import exit_code, terminate, wait_for

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


def listed_processes(name: str, expected: dict[int, int]) -> dict[int, dict] | None:
    """The row's processes by pid, once it lists exactly the pids of ``expected`` (job id ->
    the pid running it), each with its job and its resident memory; else None."""
    found = row(name)
    if found is None:
        return None
    by_pid = {process["pid"]: process for process in found.processes_detail}
    if set(by_pid) != set(expected.values()):
        return None
    if any(by_pid[pid]["jobs"] != [job_id] for job_id, pid in expected.items()):
        return None
    return by_pid if all(p["rss_bytes"] > 0 for p in by_pid.values()) else None


def test_the_row_lists_each_worker_process_and_a_running_job_names_its_process(
    spawn, tmp_path, api_users, api_client
):
    marker = tmp_path / "go"
    jobs = [
        slow.as_user(api_users.member, {"until": str(marker), "n": n, "seconds": 120})
        for n in range(2)
    ]
    worker = spawn(
        "runjobs", "--name", "two", "--processes", "2", "--concurrency", "1", "--no-scheduler",
        env=FAST_BEAT,
    )  # fmt: skip
    wait_for(lambda: len(started_pids("slow-start")) == 2, "both jobs started", worker)
    ran_by = started_pids("slow-start")  # job id -> the worker process that runs it
    wait_for(lambda: listed_processes("two", ran_by), "the row lists both processes", worker)
    by_pid = listed_processes("two", ran_by)
    assert by_pid is not None and worker.popen.pid not in by_pid  # the parent runs no job
    assert sorted(p["slot"] for p in by_pid.values()) == [0, 1]
    assert all(
        alive(pid) and (p["generation"], p["restarts"]) == (0, 0) for pid, p in by_pid.items()
    )
    [listed] = operations.workers()
    assert listed["processes_detail"] == row("two").processes_detail  # jobs workers --json

    # A running job names its process to operators (the API, jobs inspect); not to its owner.
    operator, member = api_client(api_users.operator), api_client(api_users.member)
    for job in jobs:
        seen = operator.get(f"/api/jobs/{job.pk}/").json()
        assert (seen["worker"], seen["worker_pid"]) == ("two", ran_by[job.pk])
        out = StringIO()
        call_command("jobs", "inspect", str(job.pk), "--json", stdout=out)
        assert json.loads(out.getvalue())["worker_pid"] == ran_by[job.pk]
        mine = member.get(f"/api/jobs/{job.pk}/").json()
        assert mine["state"] == "running" and not {"worker", "worker_pid"} & set(mine)

    # kill -9 of one: its slot's new process is listed, with the restart counted.
    lost = jobs[0]
    victim = ran_by[lost.pk]
    slot = by_pid[victim]["slot"]
    os.kill(victim, signal.SIGKILL)

    def restarted() -> bool:
        current = {p["slot"]: p for p in row("two").processes_detail}
        new = current.get(slot)
        return new is not None and new["pid"] != victim and new["restarts"] == 1

    wait_for(restarted, "the slot's restart is listed", worker)
    current = {p["slot"]: p for p in row("two").processes_detail}
    assert len(current) == 2 and alive(current[slot]["pid"])
    assert current[1 - slot]["pid"] == ran_by[jobs[1].pk] and current[1 - slot]["restarts"] == 0
    marker.touch()
    wait_for(lambda: all(state(job) == "succeeded" for job in jobs), "the jobs end", worker)
    assert terminate(worker) == 0
    assert row("two").processes_detail == []  # stopped: no process


def test_with_processes_0_the_row_lists_the_workers_own_process(spawn, tmp_path):
    marker = tmp_path / "go"
    job = slow.enqueue({"until": str(marker), "n": 0, "seconds": 120})
    worker = spawn("runjobs", "--name", "solo", "--processes", "0", env=FAST_BEAT)
    pid = worker.popen.pid
    wait_for(lambda: listed_processes("solo", {job.pk: pid}), "its process is listed", worker)
    [process] = row("solo").processes_detail
    assert (process["slot"], process["generation"], process["restarts"]) == (0, 0, 0)
    job.refresh_from_db()
    assert worker_pid(job.worker_id) == pid
    marker.touch()
    wait_for(lambda: state(job) == "succeeded", "the job ends", worker)
    wait_for(lambda: row("solo").processes_detail[0]["jobs_done"] == 1, "its count", worker)
    assert terminate(worker) == 0


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
