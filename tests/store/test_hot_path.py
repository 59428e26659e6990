"""The fast paths of admission and claiming behave as the plain ORM would.

Jobs built from ``RETURNING`` rows equal the ORM's reads of the same rows; an enqueue in
autocommit is one statement that also wakes workers on PostgreSQL, and a rollback or a deduped
enqueue wakes nobody. Runs on SQLite and PostgreSQL (the NOTIFY tests on PostgreSQL only).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import TransactionTestCase
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import clock
from django_jobs.engine.rows.publish import store_events
from django_jobs.events.outbox import writer
from django_jobs.events.payloads import encode, event_data
from django_jobs.models import Job, JobEventRecord
from django_jobs.store import NewJob, get_store
from testproject.jobs import noop
from tests.conftest import claim

CHANNEL = "django_jobs"  # django_jobs.store.postgres.CHANNEL, without importing psycopg here

FIELDS = [f.attname for f in Job._meta.concrete_fields]


def as_read_back(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in FIELDS}


def assert_same_as_orm(jobs: list[Job]) -> None:
    assert jobs, "nothing to compare"
    for job in jobs:
        assert set(FIELDS) <= job.__dict__.keys()  # every field loaded, none deferred
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

        later = clock.now() + timedelta(seconds=5)
        claimed = claim("w", limit=100, engine=None, now=later)
        assert len(claimed) == len(single) + len(many)
        assert all(job.state == "running" and job.attempts == 1 for job in claimed)
        assert_same_as_orm(claimed)

    def test_a_batch_whose_rows_differ_in_every_column_is_inserted_as_sent(self):
        # enqueue_many's rows share all but their payload and key; the store takes any rows.
        alice = User.objects.create(username="alice")
        now = clock.now()
        rows = [
            NewJob(
                kind=f"kind.{i}",
                queue=f"q{i}",
                engine="default" if i else "other",
                payload={"i": i} if i != 1 else None,
                owner_id=alice.pk if i % 2 else None,
                tenant=None if i == 2 else f"t{i}",
                priority=i - 1,
                max_attempts=i + 1,
                idempotency_key=f"key-{i}" if i else None,
                version=f"v{i}",
                captured={"c": i} if i == 2 else None,
                run_at=now + timedelta(seconds=i),
                created_at=now,
            )
            for i in range(4)
        ]
        jobs = [job for job, deduped in get_store().insert(rows) if not deduped]
        assert [(j.kind, j.queue, j.engine, j.priority) for j in jobs] == [
            (r.kind, r.queue, r.engine, r.priority) for r in rows
        ]
        assert_same_as_orm(jobs)

    def test_a_deduped_enqueue_in_autocommit_returns_the_live_job(self):
        first = noop.enqueue({"k": 1})
        again = noop.enqueue({"k": 1})
        assert again.pk == first.pk and again.deduped and not first.deduped
        assert_same_as_orm([again])
        batch = noop.enqueue_many([{"k": 1}, {"k": 2}, {"k": 2}])
        assert [j.deduped for j in batch] == [True, False, True]
        assert batch[0].pk == first.pk and batch[1].pk == batch[2].pk
        assert Job.objects.count() == 2


# Values as varied as admission accepts: keys and tenants hold no control character (nor
# NUL), and a job is due at most 10 years ahead.
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), max_size=30)
when = st.datetimes(
    min_value=datetime(2001, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.timezones()
)


@pytest.mark.django_db(transaction=True)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    owned=st.booleans(),
    tenant=st.none() | texts,
    priority=st.none() | st.integers(-32768, 32767),
    key=st.none() | texts.filter(bool),
    run_at=st.none() | when,
    batch=st.integers(1, 4),
)
def test_the_stored_event_is_the_event_of_the_row(owned, tenant, priority, key, run_at, batch):
    """job.created is stored with the job (by the insert itself on PostgreSQL, whose text is
    made before the row exists): it must be the very text made from the row read back.

    The enqueues run in autocommit, as a view's or a script's do: a test transaction would
    take the path of an enqueue inside the caller's transaction (tested below). Each example
    starts without jobs or events (what it writes); the database is emptied once, after the
    last, rather than after each example."""
    JobEventRecord.objects.all().delete()
    Job.objects.all().delete()
    owner = User.objects.get_or_create(username="owner")[0] if owned else None
    payloads = [{"i": i} for i in range(batch)]
    options = {"owner": owner, "tenant": tenant, "priority": priority, "run_at": run_at}
    if batch == 1:
        jobs = [noop.enqueue(payloads[0], idempotency_key=key, **options)]
    else:
        # A key shared by the batch dedupes it to one job (and one event).
        jobs = noop.enqueue_many(payloads, idempotency_key=key, **options)
    created = {job.pk for job in jobs if not job.deduped}
    rows = JobEventRecord.objects.filter(job_id__in=[j.pk for j in jobs], type="job.created")
    assert sorted(row.job_id for row in rows) == sorted(created)
    for row in rows:
        job = Job.objects.get(pk=row.job_id)
        assert row.data == encode(event_data("job.created", job, job.created_at))
        assert row.owner == (None if owner is None else str(owner.pk))
        assert row.created_at == job.created_at


class CreatedEventTests(TransactionTestCase):
    """job.created inside the caller's transaction, in id order, and when its insert fails."""

    def test_inside_a_transaction_job_created_is_stored_before_the_commit_returns(self):
        with transaction.atomic():
            job = noop.enqueue({"in": "atomic"})
            many = noop.enqueue_many([{"in": "atomic", "n": i} for i in range(3)])
            assert not JobEventRecord.objects.exists()  # not before the commit
        # No writer thread to wait for: the rows exist once the commit has returned.
        rows = JobEventRecord.objects.filter(type="job.created").order_by("id")
        assert [row.job_id for row in rows] == [job.pk, *(j.pk for j in many)]
        with pytest.raises(RuntimeError), transaction.atomic():
            noop.enqueue({"rolled": "back"})
            raise RuntimeError("roll back")
        assert writer.flush(timeout=10)
        assert JobEventRecord.objects.count() == 4  # nothing for the rolled-back job

    def test_event_ids_follow_job_ids_in_a_batch(self):
        jobs = noop.enqueue_many([{"order": i} for i in range(50)])
        rows = JobEventRecord.objects.filter(type="job.created").order_by("id")
        assert [row.job_id for row in rows] == [job.pk for job in jobs]

    def test_a_failing_event_insert_still_enqueues_and_the_event_follows(self):
        table = JobEventRecord._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
        try:
            job = noop.enqueue({"events": "away"})
        finally:
            with connection.cursor() as cursor:
                cursor.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
        assert Job.objects.filter(pk=job.pk, state="queued").exists()
        assert writer.flush(timeout=10)
        assert list(
            JobEventRecord.objects.filter(job_id=job.pk).values_list("type", flat=True)
        ) == ["job.created"]


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
        # The process's ids in hand (a first enqueue, or one after a pause, draws them with a
        # statement of its own: IdsDrawnAheadTests).
        noop.enqueue({"n": 0})
        # The statement also stores the job's job.created event row (live events are on).
        with self.assertNumQueries(1):
            job = noop.enqueue({"n": 1})
        assert JobEventRecord.objects.filter(job_id=job.pk, type="job.created").count() == 1
        previous = store_events(False)
        try:
            with self.assertNumQueries(1):
                noop.enqueue({"n": 4})
        finally:
            store_events(previous)
        noop.enqueue_many([{"n": 2}, {"n": 3}])
        assert self.notes_until_marker() == ["default", "default", "default", "default"]

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
