"""A worker's live events are stored by its keeper thread (``EventWriter.keep_by``).

In a real ``runjobs`` process: a job's ``job.started`` is stored while it still runs (not with
its outcome), every job's events are stored once each, in the order they happened, and they
carry the moment its attempt began, not its claim's (a prefetched job waits after it). In this
process: events published while a keeper stores them wait for it (no writer thread starts), a
failed write keeps them for the next call without blocking the keeper, and a keeper that stops
hands what is left to the writer thread.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest
from django.db import OperationalError

from django_jobs.engine.rows import publish as publish_module
from django_jobs.engine.rows.publish import EventWriter, storing_events
from django_jobs.models import Job, JobEventRecord
from django_jobs.store import events as event_store
from testproject.jobs import record, slow
from tests.conftest import wait_until

pytestmark = pytest.mark.process


def event_types(job_id: int) -> list[str]:
    rows = JobEventRecord.objects.filter(job_id=job_id).order_by("id")
    return list(rows.values_list("type", flat=True))


def test_a_workers_events_are_stored_as_they_happen_once_each_in_order(spawn, tmp_path: Path):
    assert storing_events()
    marker = tmp_path / "release"
    held = slow.enqueue({"until": str(marker), "seconds": 60})
    worker = spawn("runjobs", "--concurrency", "2")
    worker.wait_for_output("ready")

    # job.started is stored while the job still runs: the keeper does not hold it until the
    # job's outcome.
    wait_until(lambda: "job.started" in event_types(held.pk), timeout=30)
    assert Job.objects.get(pk=held.pk).state == "running"
    assert event_types(held.pk) == ["job.created", "job.started"]

    batch = record.enqueue_many([{"n": n} for n in range(40)])
    marker.touch()
    ids = [held.pk, *(job.pk for job in batch)]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, state="succeeded").count() == len(ids),
        timeout=60,
    )
    wait_until(
        lambda: (
            JobEventRecord.objects.filter(job_id__in=ids, type="job.succeeded").count() == len(ids)
        ),
        timeout=30,
    )
    for job_id in ids:
        assert event_types(job_id) == ["job.created", "job.started", "job.succeeded"], job_id
    worker.popen.terminate()
    assert worker.wait(30) == 0, worker.output()


def event_data(job_id: int, event_type: str) -> dict:
    return json.loads(JobEventRecord.objects.get(job_id=job_id, type=event_type).data)


def test_a_prefetched_jobs_events_carry_the_moment_its_attempt_began_not_its_claim(
    spawn, tmp_path: Path
):
    marker = tmp_path / "release"
    held = slow.enqueue({"until": str(marker), "seconds": 60})
    worker = spawn("runjobs", "--processes", "0", "--concurrency", "1")
    worker.wait_for_output("ready")
    wait_until(lambda: "job.started" in event_types(held.pk), timeout=30)

    # The one slot is busy: the worker claims the next job into its local queue, where it
    # waits, "running" since its claim, until the slot is free.
    waiting = record.enqueue({"n": "prefetched"})
    wait_until(lambda: Job.objects.get(pk=waiting.pk).state == "running", timeout=30)
    claimed_at = Job.objects.get(pk=waiting.pk).started_at
    assert event_types(waiting.pk) == ["job.created"]
    marker.touch()
    everything = ["job.created", "job.started", "job.succeeded"]
    wait_until(lambda: event_types(waiting.pk) == everything, timeout=60)

    started, ended = event_data(waiting.pk, "job.started"), event_data(waiting.pk, "job.succeeded")
    began = datetime.fromisoformat(started["job"]["started_at"])
    assert began == Job.objects.get(pk=waiting.pk).started_at  # as recorded with its outcome
    assert datetime.fromisoformat(started["at"]) == began
    assert ended["job"]["started_at"] == started["job"]["started_at"]
    # It began once the slot was free, after its claim.
    assert began > claimed_at
    assert began >= Job.objects.get(pk=held.pk).ended_at
    worker.popen.terminate()
    assert worker.wait(30) == 0, worker.output()


@pytest.mark.django_db(transaction=True)
def test_a_keeper_stores_what_is_published_and_a_failed_write_waits_for_the_next_call(
    monkeypatch,
):
    writer = EventWriter()
    woken: list[int] = []
    writer.keep_by(lambda: woken.append(1))
    job = record.enqueue({"n": "kept"})
    at = job.created_at

    writer.submit_row("job.started", job, at, None)
    writer.submit_row("job.log", job, at, "a line")
    assert woken and writer._thread is None  # no writer thread: the keeper is woken

    real_insert = event_store.insert
    calls: list[int] = []

    def failing(*args, **kwargs):
        calls.append(1)
        raise OperationalError("the database is away")

    monkeypatch.setattr(event_store, "insert", failing)
    writer.store_pending()  # fails: returns at once, the rows stay pending
    assert calls == [1] and len(writer._pending) == 2
    writer.store_pending()  # before RETRY_AFTER: no second try
    assert calls == [1]

    monkeypatch.setattr(event_store, "insert", real_insert)
    monkeypatch.setattr(writer, "_retry_at", 0.0)
    writer.store_pending()
    assert writer._pending == []
    stored = JobEventRecord.objects.filter(job_id=job.pk).exclude(type="job.created")
    assert list(stored.order_by("id").values_list("type", flat=True)) == ["job.started", "job.log"]


@pytest.mark.django_db(transaction=True)
def test_a_keeper_that_stops_hands_the_events_left_to_the_writer_thread(monkeypatch):
    monkeypatch.setattr(publish_module, "IDLE_CLOSE", 0.01)
    writer = EventWriter()

    def wake() -> None:
        pass

    writer.keep_by(wake)
    job = record.enqueue({"n": "left"})
    writer.submit_row("job.started", job, job.created_at, None)
    assert writer._thread is None
    writer.kept_no_more(wake)
    assert not writer.kept
    assert writer.flush(10)
    assert event_types(job.pk) == ["job.created", "job.started"]


def test_a_forked_worker_process_keeps_its_keeper_from_before_its_first_event():
    """A template forks worker processes: the child's keeper registers before any event is
    published there, and must still store them (a writer thread of the child's own, started
    because the fork was noticed only at the first event, drained durable steps at half the
    rate)."""
    writer = publish_module.writer
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked process: report over the pipe, never return into pytest
        try:
            woken: list[int] = []
            writer.keep_by(lambda: woken.append(1))
            writer.submit_all([object()])  # type: ignore[list-item]  # never stored here
            ok = woken == [1] and writer.kept and writer._thread is None
            os.write(write, b"kept" if ok else f"lost {woken} {writer._thread}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        said = answer.read().decode()
    os.waitpid(pid, 0)
    assert said == "kept"
