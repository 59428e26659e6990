"""Resolving an ``unknown`` step acts like a retry: idle workers wake, watchers hear of it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import connection

from django_jobs import Uncertain, job, operations
from django_jobs.events.outbox import writer
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobEventRecord
from django_jobs.store.postgres import CHANNEL
from django_jobs.testing import run_until_idle
from tests.conftest import on_postgres

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def uncertain_kind() -> Iterator[object]:
    @job("resolve.pay", idempotency_key="payload")
    def pay(ctx):
        return ctx.step.run("pay", lambda: (_ for _ in ()).throw(Uncertain("timed out")))

    yield pay
    unregister("resolve.pay")


@pytest.fixture
def listen() -> Iterator[Callable[[], psycopg.Connection | None]]:
    """``listen()``: from now on, a connection LISTENing as an idle PostgreSQL worker does
    (None on SQLite, whose workers poll)."""
    opened: list[psycopg.Connection] = []

    def start() -> psycopg.Connection | None:
        if not on_postgres():
            return None
        conn = psycopg.connect(**connection.get_connection_params(), autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        opened.append(conn)
        return conn

    yield start
    for conn in opened:
        conn.close()


def event_types(job_id: int) -> list[str]:
    writer.flush()
    return list(
        JobEventRecord.objects.filter(job_id=job_id).order_by("id").values_list("type", flat=True)
    )


def unknown_job(kind) -> Job:
    job_ = kind.enqueue({"order": 1})
    [ran] = run_until_idle()
    assert ran.state == "unknown"
    return job_


def test_resolved_as_completed_wakes_idle_workers_and_says_job_retrying(uncertain_kind, listen):
    job_ = unknown_job(uncertain_kind)
    before = event_types(job_.pk)
    listener = listen()

    operations.resolve(job_.pk, "pay", "completed", {"paid": "by hand"})

    assert Job.objects.get(pk=job_.pk).state == "queued"
    assert event_types(job_.pk) == [*before, "job.retrying"]
    if listener is not None:
        notes = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.payload for n in notes] == ["default"]  # the job's engine
    [ran] = run_until_idle()
    assert ran.state == "succeeded" and ran.result == {"paid": "by hand"}


def test_resolved_as_failed_says_job_failed(uncertain_kind, listen):
    job_ = unknown_job(uncertain_kind)
    before = event_types(job_.pk)
    listener = listen()

    operations.resolve(job_.pk, "pay", "failed")

    assert Job.objects.get(pk=job_.pk).state == "failed"
    assert event_types(job_.pk) == [*before, "job.failed"]
    if listener is not None:  # nothing to run: no wake-up (a later NOTIFY comes first)
        connection.cursor().execute("SELECT pg_notify(%s, 'marker')", [CHANNEL])
        notes = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.payload for n in notes] == ["marker"]
