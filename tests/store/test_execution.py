"""Running jobs in-process: retries on a moved clock, waiting, cancel, blocked, timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import TestCase, override_settings

from django_jobs import (
    Blocked,
    NotCancellable,
    NotRetryable,
    Retry,
    RetryLater,
    Uncertain,
    Unrecoverable,
    cancel,
    job,
    retry,
    wake_waiting,
)
from django_jobs.kinds.registry import unregister
from django_jobs.kinds.retry import RetryDecision
from django_jobs.models import Job
from django_jobs.serialize import job_json
from django_jobs.testing import run_until_idle
from testproject.jobs import always_fail, async_job, keeps_requeueing, noop, record
from testproject.models import Execution

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def executions(job_id: int, label: str | None = None) -> int:
    rows = Execution.objects.filter(job_id=job_id)
    return (rows.filter(label=label) if label else rows).count()


class RetryScheduleTests(TestCase):
    def test_retries_follow_the_schedule_then_the_job_is_a_dead_letter(self):
        # test.fail: 3 attempts, exponential from 10 s, no jitter -> retries at +10 s, +20 s.
        with time_machine.travel(T0, tick=False) as clock:
            job_ = always_fail.enqueue({"pad": 5000})
            [first] = run_until_idle()
            assert first.state == "queued" and first.attempts == 1
            assert first.run_at == T0 + timedelta(seconds=10)
            assert "RuntimeError: boom" in first.error

            clock.shift(timedelta(seconds=9.9))
            assert run_until_idle() == []
            clock.shift(timedelta(seconds=0.1))
            [second] = run_until_idle()
            assert second.attempts == 2 and second.state == "queued"
            assert second.run_at == T0 + timedelta(seconds=10 + 20)

            clock.shift(timedelta(seconds=20))
            [third] = run_until_idle()
            assert third.pk == job_.pk and third.state == "failed" and third.attempts == 3
            assert third.error.startswith("MAX_ATTEMPTS")
            assert "RuntimeError: boom" in third.error and "Traceback" in third.error
            assert len(third.error) <= 2000
            assert third.ended_at == T0 + timedelta(seconds=30)
        assert executions(job_.pk) == 3
        assert Job.objects.filter(pk=job_.pk, state="failed").exists()  # never dropped

    def test_a_retry_due_now_runs_in_the_same_call(self):
        calls = []

        @job(
            "unit.flaky", idempotency_key="payload", retry=Retry(attempts=3, delay=0, jitter=False)
        )
        def flaky(ctx):
            calls.append(ctx.attempt)
            if ctx.attempt < 3:
                raise ValueError("not yet")
            return "ok"

        try:
            flaky.enqueue({})
            ran = run_until_idle()
            assert [j.state for j in ran] == ["queued", "queued", "succeeded"]
            assert calls == [1, 2, 3]
        finally:
            unregister("unit.flaky")

    def test_operator_retry_of_a_dead_letter_gives_fresh_attempts(self):
        with time_machine.travel(T0, tick=False) as clock:
            failed = always_fail.enqueue({})
            for _ in range(3):
                run_until_idle()
                clock.shift(timedelta(minutes=5))
            assert Job.objects.get(pk=failed.pk).state == "failed"
            data = retry(failed.pk)
            assert data["state"] == "queued" and data["max_attempts"] == 6
            [again] = run_until_idle()
            assert again.attempts == 4 and again.state == "queued"

    def test_the_kinds_retry_policy_decides(self):
        # The executor asks the policy's ``decide``: a policy of its own is obeyed as it says.
        later = T0 + timedelta(days=2)

        class AtNoon(Retry):
            def decide(self, attempt, now, *, limit=None):
                return RetryDecision(retry=attempt < 2, run_at=later)

        @job("unit.noon", idempotency_key="payload", retry=AtNoon(attempts=5))
        def fails(ctx):
            raise ValueError("again")

        try:
            with time_machine.travel(T0, tick=False) as clock:
                fails.enqueue({})
                [first] = run_until_idle()
                assert first.state == "queued" and first.run_at == later
                clock.move_to(later)
                [second] = run_until_idle()
                assert second.state == "failed" and second.attempts == 2  # decide said stop
        finally:
            unregister("unit.noon")

    def test_retry_refuses_live_and_succeeded_jobs(self):
        job_ = noop.enqueue({})
        with pytest.raises(NotRetryable):
            retry(job_.pk)
        run_until_idle()
        with pytest.raises(NotRetryable, match="succeeded"):
            retry(job_.pk)


class ControlFlowTests(TestCase):
    def setUp(self):
        self.kinds = []

    def tearDown(self):
        for kind in self.kinds:
            unregister(kind)

    def define(self, kind, exc, attempts=3):
        self.kinds.append(kind)

        @job(kind, idempotency_key="payload", retry=Retry(attempts=attempts, jitter=False))
        def runner(ctx):
            raise exc

        return runner

    def test_blocked_unrecoverable_uncertain(self):
        blocked = self.define("unit.blocked", Blocked("needs a human")).enqueue({})
        dead = self.define("unit.dead", Unrecoverable("card declined")).enqueue({})
        unknown = self.define("unit.uncertain", Uncertain("timeout from bank")).enqueue({})
        run_until_idle()
        states = {j.pk: (j.state, j.error, j.attempts) for j in Job.objects.all()}
        assert states[blocked.pk] == ("blocked", "Blocked: needs a human", 1)
        assert states[dead.pk] == ("failed", "Unrecoverable: card declined", 1)
        assert states[unknown.pk] == ("unknown", "Uncertain: timeout from bank", 1)
        assert retry(blocked.pk)["state"] == "queued"
        with pytest.raises(NotRetryable, match="resolve"):
            retry(unknown.pk)

    def test_retry_later_uses_an_attempt_and_its_own_delay(self):
        with time_machine.travel(T0, tick=False):
            later = self.define("unit.later", RetryLater("rate limited", after="2m")).enqueue({})
            [ran] = run_until_idle()
        assert ran.pk == later.pk and ran.state == "queued" and ran.attempts == 1
        assert ran.run_at == T0 + timedelta(minutes=2)


class WaitingTests(TestCase):
    def test_requeue_waits_without_using_an_attempt_and_wake_waiting_re_asks(self):
        with time_machine.travel(T0, tick=False) as clock:
            job_ = keeps_requeueing.enqueue({})
            [ran] = run_until_idle()
            assert ran.state == "waiting" and ran.wait_reason == "waiting for the warehouse"
            assert ran.attempts == 1 and ran.run_at == T0 + timedelta(hours=1)
            assert run_until_idle() == []
            assert wake_waiting() == 1
            [again] = run_until_idle()
            assert again.attempts == 1 and executions(job_.pk) == 2
            clock.shift(timedelta(hours=1))
            [third] = run_until_idle()
            assert third.attempts == 1 and executions(job_.pk) == 3

    def test_cancelling_a_waiting_job_disarms_its_re_ask(self):
        with time_machine.travel(T0, tick=False) as clock:
            job_ = keeps_requeueing.enqueue({})
            run_until_idle()
            data = cancel(job_.pk)
            assert data["state"] == "cancelled" and data["ended_at"] == T0.isoformat()
            wake_waiting()
            clock.shift(timedelta(days=2))
            assert run_until_idle() == []
        assert executions(job_.pk) == 1

    def test_cancel_queued_at_once_and_ended_refused(self):
        job_ = noop.enqueue({})
        assert cancel(job_.pk)["state"] == "cancelled"
        assert run_until_idle() == []
        with pytest.raises(NotCancellable):
            cancel(job_.pk)
        assert retry(job_.pk)["state"] == "queued"

    def test_cancelling_a_running_job_sets_the_flag_the_runner_sees(self):
        seen = {}

        @job("unit.cancellable", idempotency_key="payload")
        def runner(ctx):
            cancel(ctx.job.pk)
            seen["before"] = ctx.cancelled
            from django_jobs.store import get_store

            flags = get_store().heartbeat("inline", T0 + timedelta(days=1))
            ctx.live.cancel_requested = flags[ctx.job.pk]
            seen["after"] = ctx.cancelled
            ctx.check_cancelled()

        try:
            runner.enqueue({})
            [ran] = run_until_idle()
        finally:
            unregister("unit.cancellable")
        assert seen == {"before": False, "after": True}
        assert ran.state == "cancelled"

    def test_a_cancel_heard_by_the_runner_stops_a_retry_or_a_wait(self):
        calls = []

        @job("unit.fails_after_cancel", idempotency_key="payload", retry=Retry(attempts=3, delay=0))
        def runner(ctx):
            calls.append(ctx.attempt)
            cancel(ctx.job.pk)
            ctx.live.cancel_requested = True  # as the worker does once it hears of it
            if ctx.payload["then"] == "fail":
                raise RuntimeError("would be retried")
            return ctx.requeue("would wait", after="1h")

        try:
            failing, waiting = runner.enqueue({"then": "fail"}), runner.enqueue({"then": "wait"})
            ran = {job_.pk: job_ for job_ in run_until_idle()}
        finally:
            unregister("unit.fails_after_cancel")
        assert len(calls) == 2  # neither went on: no retry, no wait
        for job_ in (failing, waiting):
            assert ran[job_.pk].state == "cancelled"
            assert ran[job_.pk].cancel_requested is False
        assert "would be retried" in ran[failing.pk].error

    def test_a_cancel_requested_as_an_attempt_ends_stops_the_next_before_its_runner(self):
        calls = []

        @job("unit.cancel_then_fail", idempotency_key="payload", retry=Retry(attempts=3, delay=0))
        def runner(ctx):
            calls.append(ctx.attempt)
            cancel(ctx.job.pk)  # its worker has not heard of it when the attempt fails
            raise RuntimeError("boom")

        try:
            job_ = runner.enqueue({})
            run_until_idle(max_jobs=1)
            job_.refresh_from_db()
            # The attempt's retry keeps the request: still live, still asked to cancel.
            assert (job_.state, job_.cancel_requested) == ("queued", True)
            assert job_json(job_)["cancel_requested"] is True
            [ran] = run_until_idle()
        finally:
            unregister("unit.cancel_then_fail")
        assert calls == [1]  # the next attempt never ran its runner
        assert (ran.state, ran.cancel_requested) == ("cancelled", False)
        assert job_json(ran)["cancel_requested"] is False
        assert retry(ran.pk)["cancel_requested"] is False


class RunnerKindsTests(TestCase):
    def test_async_runner(self):
        job_ = async_job.enqueue({"x": 1})
        [ran] = run_until_idle()
        assert ran.pk == job_.pk and ran.state == "succeeded"
        assert ran.result == {"async": True, "payload": {"x": 1}}
        assert ran.log == ["async says hi"] and ran.progress == {"stage": "half", "percent": 50.0}

    def test_priority_then_run_at_then_id(self):
        low = noop.enqueue({"n": "low"}, priority=5)
        first = noop.enqueue({"n": "first"}, priority=-1)
        later = noop.enqueue({"n": "later"})
        early = noop.enqueue({"n": "early"}, run_at=T0)
        assert [j.pk for j in run_until_idle()] == [first.pk, early.pk, later.pk, low.pk]

    def test_engine_filter(self):
        from testproject.jobs import fleet

        a = noop.enqueue({})
        b = fleet.enqueue({})
        assert [j.pk for j in run_until_idle(engine="fleet")] == [b.pk]
        assert [j.pk for j in run_until_idle()] == [a.pk]

    @override_settings(JOBS={"LOG_TAIL": 3})
    def test_log_keeps_the_tail(self):
        @job("unit.chatty", idempotency_key="payload")
        def chatty(ctx):
            for i in range(10):
                ctx.log(f"line {i}")
                ctx.progress("counting", i * 10)

        try:
            chatty.enqueue({})
            [ran] = run_until_idle()
        finally:
            unregister("unit.chatty")
        assert ran.log == ["line 7", "line 8", "line 9"]
        assert ran.progress == {"stage": "counting", "percent": 90.0}

    def test_timeout_fails_the_attempt_with_job_timeout(self):
        with time_machine.travel(T0, tick=False) as clock:

            @job("unit.slowpoke", idempotency_key="payload", timeout="5s", retry=Retry(attempts=1))
            def slowpoke(ctx):
                clock.shift(timedelta(seconds=6))
                assert ctx.cancelled  # cooperative code sees the deadline pass
                return "too late"

            try:
                slowpoke.enqueue({})
                [ran] = run_until_idle()
            finally:
                unregister("unit.slowpoke")
        assert ran.state == "failed" and "JOB_TIMEOUT: " in ran.error


class BlockedOnDriftTests(TestCase):
    def test_unregistered_kind_version_drift_and_invalid_payload_block(self):
        gone = noop.enqueue({"x": 1})
        Job.objects.filter(pk=gone.pk).update(kind="retired.kind")
        drift = record.enqueue({"n": 1})
        Job.objects.filter(pk=drift.pk).update(version="0")
        from testproject.jobs import validated

        invalid = validated.enqueue({"order": 3})
        Job.objects.filter(pk=invalid.pk).update(payload={"order": -1})
        run_until_idle()
        rows = {j.pk: j for j in Job.objects.all()}
        assert rows[gone.pk].state == "blocked" and "not registered" in rows[gone.pk].error
        # A kind added after the worker started: the error says to restart the workers.
        assert "runs the code it started with" in rows[gone.pk].error
        assert "restart the workers" in rows[gone.pk].error
        assert "SIGHUP" in rows[gone.pk].error and "runjobs --reload" in rows[gone.pk].error
        assert rows[drift.pk].state == "blocked" and "version" in rows[drift.pk].error
        assert (
            rows[invalid.pk].state == "blocked" and "no longer validates" in rows[invalid.pk].error
        )


class TimestampTests(TestCase):
    def test_missing_timestamps_are_derived_on_read(self):
        job_ = noop.enqueue({})
        run_until_idle()
        Job.objects.filter(pk=job_.pk).update(started_at=None, created_at=None)
        row = Job.objects.get(pk=job_.pk)
        assert row.timestamps_derived is True
        assert row.started_at is not None and row.created_at is not None
        assert row.created_at <= row.started_at <= row.ended_at
        fresh = noop.enqueue({"fresh": 1})
        assert Job.objects.get(pk=fresh.pk).timestamps_derived is False
