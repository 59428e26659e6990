"""The fast paths of admission and claiming behave as the plain ORM would.

Jobs built from ``RETURNING`` rows equal the ORM's reads of the same rows; an enqueue in
autocommit is one statement that also wakes workers on PostgreSQL, and a rollback or a deduped
enqueue wakes nobody. Runs on SQLite and PostgreSQL (the NOTIFY tests on PostgreSQL only).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import TransactionTestCase

from django_jobs import clock
from django_jobs.models import Job
from django_jobs.signals import jobs_admitted
from django_jobs.store import get_store
from testproject.jobs import noop

CHANNEL = "django_jobs"  # django_jobs.store.postgres.CHANNEL, without importing psycopg here

FIELDS = [f.attname for f in Job._meta.concrete_fields]


def as_read_back(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in FIELDS}


def assert_same_as_orm(jobs: list[Job]) -> None:
    for job in jobs:
        stored = Job.objects.get(pk=job.pk)
        assert as_read_back(job) == as_read_back(stored)
        assert job._state.adding is False and job._state.db == stored._state.db


class BuiltFromRowsTests(TransactionTestCase):
    def test_enqueued_and_claimed_jobs_equal_the_orm_reads(self):
        alice = User.objects.create(username="alice")
        # More calls than psycopg's prepare threshold: prepared statements must agree too.
        payloads: list[Any] = [{"n": i, "nested": {"b": [1, 2.5, None]}} for i in range(7)]
        payloads += [None, "text", 3, [1, "two"], {"unicode": "é✓"}]
        single = [noop.enqueue(p, owner=alice if i % 2 else None) for i, p in enumerate(payloads)]
        assert_same_as_orm(single)
        # A None payload is SQL NULL, as the ORM would store it, not JSON null.
        assert Job.objects.filter(payload__isnull=True).count() == 1
        many = noop.enqueue_many(
            [{"batch": i} for i in range(5)], tenant="acme", priority=3, delay="1s"
        )
        assert_same_as_orm(many)

        store = get_store()
        later = clock.now() + timedelta(seconds=5)
        claimed = store.claim(
            engine=None,
            worker_id="w",
            limit=100,
            now=later,
            leased_until=later + timedelta(seconds=30),
        )
        assert len(claimed) == len(single) + len(many)
        assert all(job.state == "running" and job.attempts == 1 for job in claimed)
        assert_same_as_orm(claimed)

    def test_a_deduped_enqueue_in_autocommit_returns_the_live_job(self):
        first = noop.enqueue({"k": 1})
        again = noop.enqueue({"k": 1})
        assert again.pk == first.pk and again.deduped and not first.deduped
        assert_same_as_orm([again])
        batch = noop.enqueue_many([{"k": 1}, {"k": 2}, {"k": 2}])
        assert [j.deduped for j in batch] == [True, False, True]
        assert batch[0].pk == first.pk and batch[1].pk == batch[2].pk
        assert Job.objects.count() == 2


@pytest.mark.postgres
class WakeUpTests(TransactionTestCase):
    def setUp(self) -> None:
        if connection.vendor != "postgresql":
            pytest.skip("NOTIFY wake-ups are PostgreSQL only")
        import psycopg

        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self.listener = psycopg.connect(**params, autocommit=True)
        self.listener.execute(f"LISTEN {CHANNEL}")

    def tearDown(self) -> None:
        self.listener.close()

    def notes_until_marker(self) -> list[str]:
        """Wake-ups committed before a marker sent now: PostgreSQL delivers in commit order."""
        self.listener.execute("SELECT pg_notify(%s, 'marker')", [CHANNEL])
        notes = []
        for note in self.listener.notifies(timeout=10):
            if note.payload == "marker":
                return notes
            notes.append(note.payload)
        raise AssertionError(f"the marker never arrived; got {notes}")

    def test_an_enqueue_in_autocommit_is_one_statement_and_wakes_its_engine(self):
        # Without a jobs_admitted receiver (the live events store writes job.created in the
        # enqueue's own transaction) an enqueue in autocommit needs no transaction of its own.
        from django_jobs.events.outbox import on_jobs_admitted

        uid = "django_jobs.events.admitted"
        jobs_admitted.disconnect(dispatch_uid=uid)
        try:
            with self.assertNumQueries(1):
                noop.enqueue({"n": 1})
        finally:
            jobs_admitted.connect(on_jobs_admitted, dispatch_uid=uid)
        noop.enqueue_many([{"n": 2}, {"n": 3}])
        assert self.notes_until_marker() == ["default", "default"]

    def test_a_rollback_or_a_deduped_enqueue_wakes_nobody(self):
        noop.enqueue({"n": 1})
        assert self.notes_until_marker() == ["default"]
        with pytest.raises(RuntimeError), transaction.atomic():
            noop.enqueue({"n": 2})
            raise RuntimeError("roll back")
        assert noop.enqueue({"n": 1}).deduped
        assert self.notes_until_marker() == []
        with transaction.atomic():
            noop.enqueue({"n": 3})
            assert self.notes_until_marker() == []  # not before the commit
        assert self.notes_until_marker() == ["default"]
