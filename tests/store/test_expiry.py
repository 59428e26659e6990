"""``expires=``: a job not started by then ends ``cancelled`` ("expired") and never runs.

The clock is moved (time_machine), never slept. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.test import TestCase

from django_jobs import InvalidDuration, Retry, enqueue, job, retry
from django_jobs.engine.maintenance import end_expired_jobs
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.serialize import job_json
from django_jobs.signals import job_event
from django_jobs.testing import run_until_idle
from tests.conftest import claim

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class ExpiryTests(TestCase):
    def setUp(self):
        self.calls: Counter[str] = Counter()
        self.kinds: list[str] = []
        self.events: list[tuple[str, int]] = []

        def heard(sender, type, job, **kwargs):  # noqa: A002 - the signal's argument
            self.events.append((type, job.pk))

        self.heard = heard
        job_event.connect(heard)
        self.traveller = time_machine.travel(T0, tick=False)
        self.clock = self.traveller.start()

    def tearDown(self):
        self.traveller.stop()
        job_event.disconnect(self.heard)
        for kind in self.kinds:
            unregister(kind)

    def define(self, kind, func=None, **options):
        self.kinds.append(kind)
        options.setdefault("idempotency_key", "payload")
        options.setdefault("retry", Retry(attempts=1))

        def count(ctx):
            self.calls[kind] += 1
            return func(ctx) if func else ctx.payload

        return job(kind, **options)(count)

    def test_a_job_not_started_in_time_never_runs_and_ends_cancelled_expired(self):
        task = self.define("exp.plain")
        queued = task.enqueue({"n": 1}, expires="10s")
        assert queued.expires_at == T0 + timedelta(seconds=10)
        assert job_json(queued)["expires_at"] == "2026-06-01T12:00:10+00:00"
        self.clock.shift(timedelta(seconds=11))
        # The claim alone never starts it, before maintenance has ended it.
        assert claim() == []
        with self.captureOnCommitCallbacks(execute=True):
            ran = run_until_idle()
        assert ran == [] and self.calls["exp.plain"] == 0
        row = Job.objects.get(pk=queued.pk)
        data = job_json(row)
        assert (row.state, data["error"], data["attempts"]) == ("cancelled", "expired", 0)
        assert row.ended_at == T0 + timedelta(seconds=11)
        assert ("job.cancelled", queued.pk) in self.events
        # Its idempotency key is free again: an ended job holds none.
        again = task.enqueue({"n": 1})
        assert again.pk != queued.pk and not again.deduped

    def test_a_job_due_before_its_expiry_runs(self):
        task = self.define("exp.in_time")
        queued = task.enqueue({"n": 2}, expires="10s")
        self.clock.shift(timedelta(seconds=9))
        [ran] = run_until_idle()
        assert (ran.pk, ran.state) == (queued.pk, "succeeded")

    def test_a_job_started_before_its_expiry_runs_to_its_end_and_its_retries_run(self):
        def slow(ctx):
            # The run goes on well past the expiry, then its first attempt fails.
            self.clock.shift(timedelta(seconds=60))
            if ctx.attempt == 1:
                raise RuntimeError("first attempt fails")
            return "done"

        task = self.define("exp.slow", slow, retry=Retry(attempts=2, delay=0, jitter=False))
        queued = task.enqueue({"n": 3}, expires="10s")
        ran = run_until_idle()
        assert [j.pk for j in ran] == [queued.pk, queued.pk]
        row = Job.objects.get(pk=queued.pk)
        assert (row.state, row.result, row.attempts) == ("succeeded", "done", 2)
        assert end_expired_jobs() == []

    def test_the_duration_counts_from_when_the_job_is_due(self):
        task = self.define("exp.delayed")
        queued = task.enqueue({"n": 4}, delay="1m", expires="30s")
        assert queued.expires_at == T0 + timedelta(seconds=90)
        self.clock.shift(timedelta(seconds=80))
        [ran] = run_until_idle()
        assert ran.pk == queued.pk and ran.state == "succeeded"

    def test_an_aware_datetime_every_door_and_bad_values(self):
        task = self.define("exp.doors")
        at = T0 + timedelta(seconds=5)
        by_kind = enqueue("exp.doors", {"n": 5}, expires=at)
        many = task.enqueue_many([{"n": 6}, {"n": 7}], expires=timedelta(seconds=5))
        user = get_user_model().objects.create(username="exp")
        owned = task.as_user(user, {"n": 8}, expires=5)
        assert {j.expires_at for j in [by_kind, *many, owned]} == {at}
        plain = task.enqueue({"n": 9})
        assert plain.expires_at is None and job_json(plain)["expires_at"] is None
        with pytest.raises(ValueError, match="naive"):
            task.enqueue({"n": 10}, expires=datetime(2026, 6, 1, 12, 0))
        with pytest.raises(InvalidDuration, match="expires="):
            task.enqueue({"n": 11}, expires="soon")
        assert not Job.objects.filter(payload__n__in=[10, 11]).exists()
        self.clock.shift(timedelta(seconds=6))
        assert [j.pk for j in run_until_idle()] == [plain.pk]
        states = Counter(Job.objects.values_list("state", flat=True))
        assert states == {"cancelled": 4, "succeeded": 1}

    def test_an_operator_retry_of_an_expired_job_runs_it(self):
        task = self.define("exp.retried")
        queued = task.enqueue({"n": 12}, expires="10s")
        self.clock.shift(timedelta(seconds=11))
        assert run_until_idle() == []
        data = retry(queued.pk)
        assert data["state"] == "queued" and data["expires_at"] is None
        [ran] = run_until_idle()
        assert ran.pk == queued.pk and ran.state == "succeeded"

    def test_a_workflow_child_with_expires_ends_expired_and_wakes_its_parent(self):
        child = self.define("exp.child")

        def parent(ctx):
            ids = ctx.step.spawn("kids", child, [{"n": 1}, {"n": 2}], expires="10s")
            results = ctx.step.gather("gathered", ids, failed="collect")
            return [[r.state, r.error] for r in results]

        flow = self.define("exp.parent", parent)
        top = flow.enqueue({"p": 1})
        # The parent runs, spawns, and waits; its children are not run before the clock moves.
        ran = run_until_idle(max_jobs=1)
        assert [j.pk for j in ran] == [top.pk]
        assert Job.objects.get(pk=top.pk).state == "waiting"
        kids = list(Job.objects.filter(parent_id=top.pk).order_by("id"))
        assert [k.expires_at for k in kids] == [T0 + timedelta(seconds=10)] * 2
        self.clock.shift(timedelta(seconds=11))
        [again] = run_until_idle()
        assert again.pk == top.pk and again.state == "succeeded"
        assert again.result == [["cancelled", "expired"], ["cancelled", "expired"]]
        assert self.calls["exp.child"] == 0
