"""Admission: the outbox, idempotency, batching and bad input. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase, override_settings

from django_jobs import (
    InvalidDuration,
    InvalidPayload,
    JobDuplicate,
    OutboxNoTransaction,
    UnknownKind,
    enqueue,
)
from django_jobs.models import Job
from django_jobs.store.postgres import job_ids
from django_jobs.testing import run_until_idle
from testproject.jobs import noop, record, validated


class OutboxTests(TestCase):
    def test_a_rolled_back_enqueue_leaves_no_job_and_nothing_runs(self):
        with pytest.raises(RuntimeError), transaction.atomic():
            job = record.enqueue({"n": 1})
            assert Job.objects.filter(pk=job.pk).exists()
            raise RuntimeError("roll back")
        assert not Job.objects.filter(kind="test.record").exists()
        assert run_until_idle() == []

    def test_a_committed_enqueue_runs(self):
        with transaction.atomic():
            job = record.enqueue({"n": 2})
        [ran] = run_until_idle()
        assert ran.pk == job.pk and ran.state == "succeeded" and ran.result == {"n": 2}


class OutboxRequiredTests(TransactionTestCase):
    @override_settings(JOBS={"OUTBOX": "required"})
    def test_required_outbox_refuses_enqueue_outside_a_transaction(self):
        with pytest.raises(OutboxNoTransaction) as info:
            noop.enqueue({"x": 1})
        assert info.value.code == "OUTBOX_NO_TX"
        assert "transaction.atomic" in str(info.value)
        assert Job.objects.count() == 0
        with transaction.atomic():
            noop.enqueue({"x": 1})
        assert Job.objects.count() == 1


class IdempotencyTests(TestCase):
    def test_a_live_key_returns_the_same_job(self):
        first = record.enqueue({"n": 1})
        again = record.enqueue({"n": 1})
        assert again.pk == first.pk
        assert first.deduped is False and again.deduped is True
        assert Job.objects.count() == 1

    def test_on_conflict_error_raises(self):
        first = record.enqueue({"n": 1})
        with pytest.raises(JobDuplicate) as info:
            record.enqueue({"n": 1}, on_conflict="error")
        assert info.value.job.pk == first.pk
        assert info.value.code == "JOB_DUPLICATE"

    def test_an_ended_job_frees_its_key(self):
        first = record.enqueue({"n": 1})
        run_until_idle()
        second = record.enqueue({"n": 1})
        assert second.pk != first.pk and not second.deduped

    def test_keys_are_scoped_per_owner(self):
        from django.contrib.auth.models import User

        alice = User.objects.create(username="alice")
        bob = User.objects.create(username="bob")
        a = validated.enqueue({"order": 7}, owner=alice)
        b = validated.enqueue({"order": 7}, owner=bob)
        assert a.pk != b.pk and not b.deduped
        assert validated.enqueue({"order": 7}, owner=alice).pk == a.pk

    def test_explicit_key_overrides_the_kind_function(self):
        a = noop.enqueue({"a": 1}, idempotency_key="same")
        b = noop.enqueue({"b": 2}, idempotency_key="same")
        assert a.pk == b.pk and b.deduped


class EnqueueManyTests(TestCase):
    def test_one_round_trip_per_batch(self):
        # Ids drawn ahead are dropped after JobIds.MAX_AGE seconds: a loaded machine pausing
        # this process that long between the warm-up and the count must not add a statement
        # (the age rule has tests of its own, tests/store/test_job_ids.py). Held still here.
        saved_clock = job_ids.clock
        job_ids.clock = lambda: 0.0
        self.addCleanup(setattr, job_ids, "clock", saved_clock)
        payloads = [{"i": i} for i in range(300)]
        # The first batch of a process draws the job ids its job.created texts hold; its
        # insert draws those of the next batch (PostgreSQL: see store.postgres.JobIds).
        noop.enqueue_many([{"warm": i} for i in range(300)])
        # One insert of the jobs and their job.created rows (on PostgreSQL it also sends the
        # wake-up notification), no read-back. Inside a transaction (this test's) SQLite
        # takes a savepoint for its statements; PostgreSQL's one statement needs none.
        extra = 0 if connection.vendor == "postgresql" else 2  # the savepoint, its release
        with self.assertNumQueries(1 + extra):
            jobs = noop.enqueue_many(payloads)
        assert len(jobs) == 300 and len({j.pk for j in jobs}) == 300
        assert [j.payload for j in jobs] == payloads

    def test_duplicates_inside_and_across_batches_dedupe(self):
        existing = noop.enqueue({"i": 1})
        jobs = noop.enqueue_many([{"i": 1}, {"i": 2}, {"i": 2}, {"i": 3}])
        assert jobs[0].pk == existing.pk and jobs[0].deduped
        assert jobs[1].pk == jobs[2].pk and not jobs[1].deduped and jobs[2].deduped
        assert not jobs[3].deduped
        assert Job.objects.count() == 3


class BadInputTests(TestCase):
    def test_unknown_kind(self):
        with pytest.raises(UnknownKind) as info:
            enqueue("no.such.kind", {})
        assert info.value.code == "UNKNOWN_KIND"

    def test_payload_failing_the_serializer_lists_field_errors(self):
        with pytest.raises(InvalidPayload) as info:
            validated.enqueue({"order": 0})
        assert info.value.code == "INVALID_PAYLOAD"
        assert "order" in info.value.errors
        assert Job.objects.count() == 0

    def test_non_json_payload(self):
        with pytest.raises(InvalidPayload, match="not JSON"):
            noop.enqueue({"when": object()})
        with pytest.raises(InvalidPayload, match="not JSON"):
            noop.enqueue({"x": float("nan")})
        assert Job.objects.count() == 0

    def test_a_bad_batch_writes_nothing(self):
        with pytest.raises(InvalidPayload):
            noop.enqueue_many([{"ok": 1}, {"bad": {1, 2}}])
        assert Job.objects.count() == 0

    def test_bad_delay(self):
        with pytest.raises(InvalidDuration):
            noop.enqueue({"x": 1}, delay="soon")
        assert Job.objects.count() == 0

    @override_settings(JOBS={"MAX_PAYLOAD_BYTES": 100})
    def test_oversized_payload(self):
        with pytest.raises(InvalidPayload, match="MAX_PAYLOAD_BYTES"):
            noop.enqueue({"blob": "x" * 200})

    def test_non_json_result_fails_the_job_with_a_clear_error(self):
        from testproject.jobs import bad_result

        job = bad_result.enqueue({})
        [ran] = run_until_idle()
        assert ran.pk == job.pk and ran.state == "failed"
        assert ran.error.startswith("INVALID_RESULT") and "not JSON" in ran.error
