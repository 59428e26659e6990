"""Concurrency caps, tenant fairness and rate limits, on the claim itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import TestCase, override_settings

from django_jobs import job
from django_jobs.engine.run.limits import claim_within_limits, parse_rate
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.store import get_store
from django_jobs.testing import run_until_idle
from testproject.jobs import noop
from tests.conftest import claim_request

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def test_parse_rate():
    assert parse_rate("100/m") == (100, timedelta(minutes=1))
    assert parse_rate("5/10s") == (5, timedelta(seconds=10))
    for bad in ("fast", "0/m", "10/y", "10"):
        with pytest.raises(ValueError, match="starts per window"):
            parse_rate(bad)


def test_a_bad_rate_fails_at_decoration():
    with pytest.raises(ValueError, match="starts per window"):
        job("unit.badrate", idempotency_key="payload", rate="fast")


def claim(worker: str, limit: int = 10):
    request = claim_request(worker, limit=limit, engine=None, now=T0)
    return claim_within_limits(get_store(), request)


def running() -> int:
    return Job.objects.filter(state="running").count()


class CapTests(TestCase):
    @override_settings(JOBS={"CAPS": {"global": 3, "queues": {}, "tenant": None}})
    def test_global_cap_across_workers(self):
        noop.enqueue_many([{"i": i} for i in range(10)], run_at=T0)
        assert len(claim("w1")) == 3
        assert claim("w2") == [] and running() == 3
        assert Job.objects.filter(state="queued", attempts=0).count() == 7

    @override_settings(JOBS={"CAPS": {"global": None, "queues": {"slow": 1}, "tenant": None}})
    def test_queue_cap(self):
        noop.enqueue_many([{"s": i} for i in range(3)], queue="slow", run_at=T0)
        noop.enqueue_many([{"f": i} for i in range(3)], queue="fast", run_at=T0)
        got = claim("w1")
        assert sorted(j.queue for j in got) == ["fast", "fast", "fast", "slow"]
        assert claim("w2") == []

    @override_settings(JOBS={"CAPS": {"global": 4, "queues": {}, "tenant": 2}})
    def test_one_tenant_backlog_never_starves_another(self):
        noop.enqueue_many([{"a": i} for i in range(20)], tenant="acme", run_at=T0)
        noop.enqueue_many([{"b": i} for i in range(2)], tenant="bolt", run_at=T0)
        first = claim("w1", limit=2)
        assert sorted(j.tenant for j in first) == ["acme", "bolt"]  # round-robin
        second = claim("w2", limit=10)
        assert sorted(j.tenant for j in second) == ["acme", "bolt"]  # acme capped at 2
        assert Job.objects.filter(state="running", tenant="acme").count() == 2
        assert Job.objects.filter(state="queued", tenant="acme", attempts=0).count() == 18

    @override_settings(JOBS={"CAPS": {"global": 2, "queues": {}, "tenant": None}})
    def test_run_until_idle_respects_the_cap_and_finishes_everything(self):
        noop.enqueue_many([{"i": i} for i in range(5)])
        # One at a time in the calling thread: the cap of 2 never stops it short.
        assert len(run_until_idle()) == 5
        assert Job.objects.filter(state="succeeded").count() == 5


class RateTests(TestCase):
    def test_a_kind_rate_is_a_sliding_window(self):
        @job("unit.rated", idempotency_key="payload", rate="2/m")
        def rated(ctx):
            return ctx.payload

        try:
            with time_machine.travel(T0, tick=False) as clock:
                rated.enqueue_many([{"i": i} for i in range(5)])
                assert len(run_until_idle()) == 2
                waiting = Job.objects.filter(kind="unit.rated", state="queued")
                assert waiting.count() == 3 and set(waiting.values_list("attempts", flat=True)) == {
                    0
                }
                clock.shift(timedelta(seconds=59))
                assert run_until_idle() == []
                clock.shift(timedelta(seconds=1))
                assert len(run_until_idle()) == 2
        finally:
            unregister("unit.rated")

    @override_settings(JOBS={"RATES": {"mail": "1/h"}})
    def test_a_queue_rate(self):
        with time_machine.travel(T0, tick=False):
            noop.enqueue_many([{"m": i} for i in range(3)], queue="mail")
            noop.enqueue({"other": 1})
            ran = run_until_idle()
        assert sorted(j.queue for j in ran) == ["default", "mail"]
