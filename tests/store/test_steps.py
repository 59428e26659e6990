"""Durable steps, events and reconciliation, run in-process on a moved clock."""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from django_jobs import Retry, emit, job, resolve, retry
from django_jobs.engine.durable.steps import Steps
from django_jobs.engine.run.context import JobContext, LiveState
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobStep
from django_jobs.store import get_store
from django_jobs.testing import run_until_idle
from testproject.models import Execution
from tests.conftest import claim

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)


class StepKinds(TestCase):
    """Registers throwaway kinds per test and removes them afterwards."""

    def setUp(self):
        self.kinds: list[str] = []
        self.calls: Counter[str] = Counter()

    def tearDown(self):
        for kind in self.kinds:
            unregister(kind)

    def define(self, kind, func, **options):
        self.kinds.append(kind)
        options.setdefault("idempotency_key", "payload")
        options.setdefault("retry", Retry(attempts=3, delay=0, jitter=False))
        return job(kind, **options)(func)

    def activity(self, name, value=None, fail_times=0):
        def fn():
            self.calls[name] += 1
            if self.calls[name] <= fail_times:
                raise RuntimeError(f"{name} failed")
            return value if value is not None else name.upper()

        return fn


class ReplayTests(StepKinds):
    def test_a_retried_job_replays_completed_steps(self):
        def runner(ctx):
            a = ctx.step.run("one", self.activity("one"))
            b = ctx.step.run("two", self.activity("two", fail_times=1))
            c = ctx.step.run("three", self.activity("three"))
            return [a, b, c]

        handle = self.define("unit.three", runner)
        job_ = handle.enqueue({})
        ran = run_until_idle()
        assert [j.state for j in ran] == ["queued", "succeeded"]
        assert ran[-1].result == ["ONE", "TWO", "THREE"]
        assert self.calls == {"one": 1, "two": 2, "three": 1}
        steps = {s.name: s for s in JobStep.objects.filter(job=job_)}
        assert steps["two"].attempts == 2 and steps["two"].state == "completed"
        assert [s.name for s in JobStep.objects.filter(job=job_)] == ["one", "two", "three"]

    def test_duplicate_step_names_and_nesting_are_refused(self):
        def dup(ctx):
            ctx.step.run("same", lambda: 1)
            ctx.step.run("same", lambda: 2)

        def nested(ctx):
            ctx.step.run("outer", lambda: ctx.step.run("inner", lambda: 1))

        a = self.define("unit.dup_steps", dup, retry=Retry(attempts=1)).enqueue({})
        b = self.define("unit.nested", nested, retry=Retry(attempts=1)).enqueue({})
        run_until_idle()
        assert "StepDuplicate" in Job.objects.get(pk=a.pk).error
        assert "StepNested" in Job.objects.get(pk=b.pk).error

    def test_a_non_json_step_result_fails_before_anything_is_saved(self):
        def runner(ctx):
            ctx.step.run("bad", lambda: {"at": datetime.now()})

        job_ = self.define("unit.badstep", runner, retry=Retry(attempts=1)).enqueue({})
        [ran] = run_until_idle()
        assert ran.state == "failed" and "INVALID_RESULT" not in ran.error
        assert "InvalidResult" in ran.error and "not JSON" in ran.error
        step = JobStep.objects.get(job=job_, name="bad")
        assert step.state == "failed" and step.value is None

    def test_step_info_key_is_stable_across_attempts(self):
        keys = []

        def runner(ctx):
            ctx.step.run("pay", lambda info: keys.append((info.key, info.attempt)) or 1 / 0)

        self.define("unit.keys", runner).enqueue({})
        run_until_idle()
        assert len(keys) == 3 and len({k for k, _ in keys}) == 1
        assert [a for _, a in keys] == [1, 2, 3]

    def test_retry_from_a_step_reruns_it_and_later_ones(self):
        def runner(ctx):
            return [ctx.step.run(n, self.activity(n)) for n in ("a", "b", "c")]

        handle = self.define("unit.fromstep", runner)
        job_ = handle.enqueue({})
        run_until_idle()
        Job.objects.filter(pk=job_.pk).update(state="failed")
        retry(job_.pk, from_step="b")
        run_until_idle()
        assert self.calls == {"a": 1, "b": 2, "c": 2}

    def test_capture_is_saved_at_admission(self):
        def runner(ctx):
            return ctx.state

        handle = self.define("unit.capture", runner, capture=lambda p: {"plan": p["plan"]})
        handle.enqueue({"plan": "gold"})
        [ran] = run_until_idle()
        assert ran.result == {"plan": "gold"}


class AtomicTests(StepKinds):
    def test_atomic_effects_and_result_commit_together(self):
        def runner(ctx):
            def write():
                Execution.objects.create(job_id=ctx.job.pk, label="atomic")
                if ctx.attempt == 1:
                    raise RuntimeError("after the write, before the commit")
                return "written"

            return ctx.step.atomic("write", write)

        job_ = self.define("unit.atomic", runner).enqueue({})
        ran = run_until_idle()
        assert [j.state for j in ran] == ["queued", "succeeded"]
        assert Execution.objects.filter(job_id=job_.pk, label="atomic").count() == 1
        assert JobStep.objects.get(job=job_, name="write").value == "written"


class RecoverTests(StepKinds):
    def interrupted(self, recover):
        seen = []

        def runner(ctx):
            return ctx.step.run(
                "charge", lambda info: seen.append(info) or "charged", recover=recover
            )

        handle = self.define(f"unit.recover_{recover}", runner)
        job_ = handle.enqueue({})
        # What a crash mid-activity leaves behind: the step started and never ended, and the
        # attempt that ran it used (its lease ran out and the job was queued again).
        JobStep.objects.create(job=job_, name="charge", key="k-1", state="running", attempts=1)
        Job.objects.filter(pk=job_.pk).update(attempts=1)
        return job_, seen

    def test_recover_stop_marks_unknown_and_resolve_moves_it_on(self):
        job_, seen = self.interrupted("stop")
        [ran] = run_until_idle()
        assert ran.state == "unknown" and "resolve" in ran.error and seen == []
        assert run_until_idle() == []  # not retried automatically
        resolve(job_.pk, "charge", "completed", value="settled by hand")
        [done] = run_until_idle()
        assert done.state == "succeeded" and done.result == "settled by hand" and seen == []

    def test_recover_retry_reruns_with_interrupted_and_the_same_key(self):
        _, seen = self.interrupted("retry")
        [ran] = run_until_idle()
        assert ran.state == "succeeded"
        assert [(i.key, i.interrupted, i.attempt) for i in seen] == [("k-1", True, 2)]


class SleepTests(StepKinds):
    def test_sleep_waits_without_a_slot_then_finishes_when_due(self):
        def runner(ctx):
            ctx.step.run("before", self.activity("before"))
            ctx.step.sleep("cool", "3d")
            return ctx.step.run("after", self.activity("after"))

        with time_machine.travel(T0, tick=False) as clock:
            job_ = self.define("unit.sleepy", runner).enqueue({})
            [ran] = run_until_idle()
            assert ran.state == "waiting" and ran.run_at == T0 + timedelta(days=3)
            assert ran.attempts == 1 and "cool" in ran.wait_reason
            clock.shift(timedelta(days=3) - timedelta(seconds=1))
            assert run_until_idle() == []
            clock.shift(timedelta(seconds=1))
            [done] = run_until_idle()
        assert done.pk == job_.pk and done.state == "succeeded" and done.attempts == 1
        assert self.calls == {"before": 1, "after": 1}


class EventTests(StepKinds):
    def waiter(self, **wait):
        def runner(ctx):
            data = ctx.step.wait_for_event("approval", "order.approved", **wait)
            return {"got": data}

        return self.define("unit.waiter", runner, retry=Retry(attempts=1))

    def test_an_event_after_the_wait_began_wakes_the_job(self):
        handle = self.waiter(match={"order": 7})
        job_ = handle.enqueue({})
        [ran] = run_until_idle()
        assert ran.state == "waiting" and ran.run_at is None
        emit("order.approved", {"order": 8, "by": "x"})  # does not match
        assert run_until_idle() == []
        emit("order.approved", {"order": 7, "by": "ann"})
        [done] = run_until_idle()
        assert done.pk == job_.pk and done.result == {"got": {"order": 7, "by": "ann"}}

    def test_an_event_between_admission_and_the_wait_still_counts(self):
        handle = self.waiter(match={"order": 1})
        handle.enqueue({})
        emit("order.approved", {"order": 1})
        [done] = run_until_idle()
        assert done.state == "succeeded" and done.result == {"got": {"order": 1}}

    def test_an_event_before_admission_does_not_count(self):
        emit("order.approved", {"order": 2})
        self.waiter(match={"order": 2}).enqueue({})
        [ran] = run_until_idle()
        assert ran.state == "waiting"

    def test_timeout_raises_job_timeout_per_retry_policy(self):
        with time_machine.travel(T0, tick=False) as clock:
            self.waiter(match={"order": 3}, timeout="1h").enqueue({})
            [ran] = run_until_idle()
            assert ran.state == "waiting" and ran.run_at == T0 + timedelta(hours=1)
            clock.shift(timedelta(hours=1))
            [timed_out] = run_until_idle()
        assert timed_out.state == "failed" and "JOB_TIMEOUT: " in timed_out.error

    def test_emit_admits_on_handlers_and_a_rollback_admits_nothing(self):
        self.define("unit.on_signup", lambda ctx: ctx.payload["user"], on="user.signed_up")
        with pytest.raises(RuntimeError), transaction.atomic():
            emit("user.signed_up", {"user": "rolled-back"})
            raise RuntimeError("abort")
        assert not Job.objects.filter(kind="unit.on_signup").exists()
        [admitted] = emit("user.signed_up", {"user": "ann"})
        emit("user.signed_up", {"user": "ann"})  # a second event is a second job
        assert Job.objects.filter(kind="unit.on_signup").count() == 2
        ran = run_until_idle()
        assert {j.result for j in ran} == {"ann"} and admitted.kind == "unit.on_signup"

    def test_an_emit_while_the_job_runs_is_not_lost(self):
        # The lost-wakeup race: the event lands after the wait looked and before the job
        # parked itself. The job must be re-asked, not left waiting forever.
        def runner(ctx):
            return ctx.step.wait_for_event("wait", "race.go")

        from django_jobs.engine.durable import steps as steps_module

        original = steps_module.first_matching_event

        def racing(*args, **kwargs):
            found = original(*args, **kwargs)
            if found is None:
                emit("race.go", {"ok": True})  # arrives just after the look
            return found

        handle = self.define("unit.race", runner, retry=Retry(attempts=1))
        job_ = handle.enqueue({})
        steps_module.first_matching_event = racing
        try:
            [parked] = run_until_idle(max_jobs=1)
        finally:
            steps_module.first_matching_event = original
        assert parked.state == "waiting" and parked.run_at is not None  # re-asked at once
        [done] = run_until_idle()
        assert done.pk == job_.pk and done.state == "succeeded" and done.result == {"ok": True}


class CrashReplayProperty(StepKinds):
    """Random step outcomes and crashes never run a completed step twice or lose its result."""

    def test_random_failures_and_crashes(self):
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st

        from django_jobs import clock as jclock
        from django_jobs.engine.run.executor import Executor

        class Crash(SystemExit):
            """Stands for the process dying mid-activity: nothing after it is recorded."""

        # Each step's activity goes through its outcomes call by call; the last is "ok".
        outcomes = st.lists(st.sampled_from(["fail", "crash"]), max_size=3).map(
            lambda seq: [*seq, "ok"]
        )
        plans = st.lists(outcomes, min_size=1, max_size=5)

        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(plans=plans)
        def check(plans):
            JobStep.objects.all().delete()
            Job.objects.all().delete()
            calls: Counter[int] = Counter()
            completed_at_call: dict[int, int] = {}

            def runner(ctx):
                values = []
                for index, plan in enumerate(plans):

                    def activity(index=index, plan=plan):
                        calls[index] += 1
                        assert index not in completed_at_call, "a completed step ran again"
                        outcome = plan[min(calls[index], len(plan)) - 1]
                        if outcome == "fail":
                            raise RuntimeError(f"step {index} failed")
                        if outcome == "crash":
                            raise Crash()
                        completed_at_call[index] = calls[index]
                        return {"step": index, "call": calls[index]}

                    values.append(ctx.step.run(f"s{index}", activity))
                return values

            kind = "unit.property"
            unregister(kind)
            handle = job(
                kind, idempotency_key="payload", retry=Retry(attempts=100, delay=0, jitter=False)
            )(runner)
            store = get_store()
            executor = Executor("prop")
            with time_machine.travel(T0, tick=False) as clock:
                job_ = handle.enqueue({})
                for _ in range(60):
                    now = jclock.now()
                    claimed = claim("prop", engine=None, now=now)
                    if not claimed:
                        clock.shift(timedelta(minutes=1))
                        store.rescue(engine=None, now=jclock.now(), error="lease ran out")
                        if not store.count_due(engine=None, now=jclock.now()):
                            break
                        continue
                    try:
                        store.record([executor.run(claimed[0])])
                    except Crash:
                        pass  # the worker died: the row stays running until its lease ends
                final = Job.objects.get(pk=job_.pk)
            unregister(kind)
            assert final.state == "succeeded", (plans, final.state, final.error)
            assert final.result == [
                {"step": i, "call": completed_at_call[i]} for i in range(len(plans))
            ]
            saved = {s.name: s.value for s in JobStep.objects.filter(job=final)}
            assert saved == {f"s{i}": final.result[i] for i in range(len(plans))}

        check()


def statements(queries) -> list[str]:
    """The first word of each logged statement. A server-bound statement is logged as
    ``QUERY = "..."`` on Django 6, and without its text (``None``) on Django 5.2: counted then,
    its word unknown (``"?"``)."""
    return [
        "?" if q["sql"] is None else q["sql"].removeprefix('QUERY = "').split()[0] for q in queries
    ]


class OneWriteTests(StepKinds):
    """A plain step (no ``StepInfo``, ``recover="retry"``) is written once, at its end; the
    first run of a job reads no steps. Counted in statements, as the worker runs them."""

    def claimed(self, runner=None):
        handle = self.define("unit.one_write", runner or (lambda ctx: None))
        handle.enqueue({})
        [row] = claim("w-1")
        return JobContext(row, row.payload, LiveState(row))

    def test_a_first_run_writes_each_plain_step_in_one_statement(self):
        ctx = self.claimed()
        with CaptureQueriesContext(connection) as queries:
            values = [ctx.step.run(name, self.activity(name)) for name in ("a", "b", "c")]
        assert values == ["A", "B", "C"]
        words = statements(queries)
        assert len(words) == 3 and set(words) <= {"INSERT", "?"}  # no read, no update
        rows = list(JobStep.objects.filter(job_id=ctx.job.pk))
        assert [(r.name, r.seq, r.state, r.value, r.attempts) for r in rows] == [
            ("a", 0, "completed", "A", 1),
            ("b", 1, "completed", "B", 1),
            ("c", 2, "completed", "C", 1),
        ]
        assert all(r.started_at <= r.ended_at for r in rows)
        assert rows[0].key == f"unit.one_write:{ctx.job.pk}:a"

    def test_a_failing_plain_step_is_one_statement_and_its_retry_starts_from_that_row(self):
        def runner(ctx):
            return ctx.step.run("flaky", self.activity("flaky", fail_times=1))

        ctx = self.claimed(runner)
        with CaptureQueriesContext(connection) as queries, pytest.raises(RuntimeError):
            runner(ctx)
        assert len(queries) == 1
        failed = JobStep.objects.get(job_id=ctx.job.pk)
        assert (failed.state, failed.error, failed.attempts) == (
            "failed",
            "RuntimeError: flaky failed",
            1,
        )
        assert failed.ended_at is not None
        # The next attempt reads the row and runs the step again from it: its second attempt.
        Job.objects.filter(pk=ctx.job.pk).update(state="queued", worker_id=None)
        [done] = run_until_idle()
        assert done.state == "succeeded" and done.result == "FLAKY"
        again = JobStep.objects.get(job_id=ctx.job.pk)
        assert (again.state, again.attempts, again.error) == ("completed", 2, None)

    def test_a_step_whose_running_row_can_be_observed_is_still_written_first(self):
        ctx = self.claimed()
        seen = {}

        def look(name):
            row = JobStep.objects.filter(job_id=ctx.job.pk, name=name).first()
            seen[name] = row and row.state

        ctx.step.run("info", lambda info: look("info"))
        ctx.step.run("stop", lambda: look("stop"), recover="stop")
        ctx.step.run("plain", lambda: look("plain"))
        # Only the plain step's row is not there while it runs: nothing reads it then.
        assert seen == {"info": "running", "stop": "running", "plain": None}
        assert set(JobStep.objects.filter(job_id=ctx.job.pk).values_list("state", flat=True)) == {
            "completed"
        }

    def test_later_runs_read_the_stored_steps(self):
        # A retried attempt, and a job claimed from ``waiting`` on its first attempt, replay.
        def runner(ctx):
            first = ctx.step.run("first", self.activity("first"))
            ctx.step.sleep("nap", "1h")
            return [first, ctx.step.run("then", self.activity("then", fail_times=1))]

        handle = self.define("unit.later_runs", runner)
        with time_machine.travel(T0, tick=False) as clock_:
            job_ = handle.enqueue({})
            [parked] = run_until_idle()
            assert (parked.state, parked.attempts) == ("waiting", 1)
            clock_.shift(timedelta(hours=1))
            ran = run_until_idle()
        assert [(j.state, j.attempts) for j in ran] == [("queued", 1), ("succeeded", 2)]
        assert ran[-1].result == ["FIRST", "THEN"]
        assert self.calls == {"first": 1, "then": 2}
        assert JobStep.objects.filter(job=job_).count() == 3


def _wrapped(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class _Callable:
    def __call__(self, info):
        return info

    def method(self, info=None):
        return info


@pytest.mark.parametrize(
    "fn",
    [
        lambda: None,
        lambda info: info,
        lambda info=None: info,
        lambda a, b=1: a,
        lambda *args: args,
        lambda *, info: info,
        lambda info, /: info,
        _wrapped(lambda info: info),
        _wrapped(lambda: None),
        functools.partial(lambda a, info: info, 1),
        _Callable(),
        _Callable().method,
        print,
    ],
)
def test_takes_info_gives_the_signature_s_answer(fn):
    # A plain function is read from its code; everything else through inspect.signature.
    try:
        expected = any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
            for p in inspect.signature(fn).parameters.values()
        )
    except (TypeError, ValueError):
        expected = False
    assert Steps._takes_info(fn) is expected
