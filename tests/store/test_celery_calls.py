"""Celery's call-site habits: outcome hooks with the exception, ``ctx.is_last_attempt``,
calling a handle inline, and a job enqueueing itself again (``after_current=True``)."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest
from django.db import transaction

from django_jobs import InvalidPayload, Retry, job
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.jobs import canvas_add, canvas_batch, canvas_echo, render
from testproject.models import Execution

pytestmark = pytest.mark.django_db

calls: list[tuple[str, int, str, object]] = []


def hook(name):
    def record(job, exc):
        calls.append((name, job.pk, job.state, exc))

    return record


@pytest.fixture
def hooked():
    calls.clear()

    @job(
        "celery_calls.hooked",
        idempotency_key="payload",
        retry=Retry(attempts=3, delay=0, jitter=False),
        on_success=hook("success"),
        on_failure=hook("failure"),
        on_retry=hook("retry"),
    )
    def hooked_job(ctx):
        calls.append(("run", ctx.attempt, str(ctx.is_last_attempt), None))
        if ctx.attempt <= ctx.payload["fail_times"]:
            raise KeyError(f"attempt {ctx.attempt}")
        return "ok"

    yield hooked_job
    unregister("celery_calls.hooked")


def test_on_retry_then_on_success_get_the_job_and_the_exception_itself(hooked):
    queued = hooked.enqueue({"fail_times": 1})
    run_until_idle()
    run, retry, run2, success = calls
    assert run == ("run", 1, "False", None)
    assert retry[:3] == ("retry", queued.pk, "queued")
    assert isinstance(retry[3], KeyError) and retry[3].args == ("attempt 1",)
    assert run2 == ("run", 2, "False", None)
    assert success == ("success", queued.pk, "succeeded", None)


def test_on_failure_gets_the_last_exception_on_the_last_attempt(hooked):
    queued = hooked.enqueue({"fail_times": 5})
    run_until_idle()
    runs = [c for c in calls if c[0] == "run"]
    # is_last_attempt is true on the attempt after which the failure is final.
    assert [c[2] for c in runs] == ["False", "False", "True"]
    assert [c[0] for c in calls if c[0] != "run"] == ["retry", "retry", "failure"]
    failure = calls[-1]
    assert failure[1:3] == (queued.pk, "failed")
    assert isinstance(failure[3], KeyError) and failure[3].args == ("attempt 3",)


def test_a_hook_that_raises_is_logged_and_changes_nothing(caplog):
    @job("celery_calls.bad_hook", idempotency_key="payload", on_success=lambda j, e: 1 / 0)
    def fine(ctx):
        return 42

    try:
        queued = fine.enqueue({})
        with caplog.at_level(logging.ERROR, logger="django_jobs.hooks"):
            run_until_idle()
        queued.refresh_from_db()
        assert queued.state == "succeeded" and queued.result == 42
        assert "The on_success hook of job" in caplog.text
        assert "ZeroDivisionError" in caplog.text
    finally:
        unregister("celery_calls.bad_hook")


def test_a_hook_must_be_callable():
    with pytest.raises(TypeError, match="on_failure="):
        job("celery_calls.not_callable", idempotency_key="payload", on_failure="log it")


# -- calling a handle ---------------------------------------------------------------------------


def test_calling_a_handle_with_a_payload_runs_it_inline_now(monkeypatch):
    monkeypatch.setenv("DEMO_FRAME_SECONDS", "0")
    # Celery's task(...): no row, no worker; steps are plain calls, the result is returned.
    result = render({"video": "intro", "frames": 2})
    assert result == {"url": "/media/intro.mp4", "frames": 2}
    assert not Job.objects.exists()


def test_an_inline_call_validates_the_payload_and_raises_what_the_function_raises():
    with pytest.raises(InvalidPayload):
        render({"frames": 2})  # video is required by RenderInput
    with pytest.raises(RuntimeError, match="asked to fail"):
        canvas_add({"n": 1, "fail": True})
    assert canvas_echo({"n": 4}) == {"payload": {"n": 4}, "previous": None}
    assert not Job.objects.exists()


def test_an_inline_call_runs_steps_as_plain_calls_and_spawn_runs_children_inline():
    @job("celery_calls.square", idempotency_key="payload")
    def square(ctx):
        return ctx.payload["n"] ** 2

    @job("celery_calls.fan", idempotency_key="payload")
    def fan(ctx):
        seen = ctx.step.run("seen", lambda info: info.key)
        ctx.step.sleep("nap", "1h")  # returns at once inline
        ids = ctx.step.spawn("children", square, [{"n": n} for n in ctx.payload["ns"]])
        ctx.log("spawned")
        return {"seen": seen, "results": ctx.step.gather("gathered", ids), "job": ctx.job.pk}

    try:
        assert fan({"ns": [2, 3]}) == {
            "seen": "celery_calls.fan:inline:seen",
            "results": [4, 9],
            "job": None,
        }
        assert not Job.objects.exists()
    finally:
        unregister("celery_calls.square")
        unregister("celery_calls.fan")


def test_an_async_runner_is_awaited_inline():
    from testproject.jobs import async_job

    assert asyncio.run(async_job({"n": 3})) == {"async": True, "payload": {"n": 3}}

    @job("celery_calls.async_fan", idempotency_key="payload")
    async def async_fan(ctx):
        ids = await ctx.step.aspawn("children", async_job, [{"n": 1}, {"n": 2}])
        seen = await ctx.step.arun("seen", lambda: len(ids))
        return {"seen": seen, "results": await ctx.step.agather("gathered", ids)}

    try:
        assert asyncio.run(async_fan({})) == {
            "seen": 2,
            "results": [
                {"async": True, "payload": {"n": 1}},
                {"async": True, "payload": {"n": 2}},
            ],
        }
    finally:
        unregister("celery_calls.async_fan")


# -- a job enqueueing itself ------------------------------------------------------------------


def batches() -> list[str]:
    return list(
        Execution.objects.filter(label__startswith="batch:")
        .order_by("pk")
        .values_list("label", flat=True)
    )


def test_a_batch_loop_with_after_current_runs_every_batch():
    first = canvas_batch.enqueue({"name": "loop", "left": 3})
    ran = run_until_idle()
    assert batches() == ["batch:3", "batch:2", "batch:1"]
    jobs = list(Job.objects.filter(kind="canvas.batch").order_by("pk"))
    assert next(j.pk for j in jobs) == first.pk and len(jobs) == 3
    assert [j.state for j in jobs] == ["succeeded"] * 3
    # Behind it: each started after the one before it ended.
    assert all(a.ended_at <= b.started_at for a, b in itertools.pairwise(jobs))
    assert len(ran) == 3


def test_without_after_current_enqueueing_its_own_key_raises_job_duplicate():
    first = canvas_batch.enqueue({"name": "stuck", "left": 2, "after_current": False})
    run_until_idle()
    first.refresh_from_db()
    assert first.state == "failed"
    assert "JobDuplicate" in first.error
    assert f"Job #{first.pk} ('canvas.batch') is running" in first.error
    assert "after_current=True" in first.error and "ctx.requeue" in first.error
    assert Job.objects.filter(kind="canvas.batch").count() == 1


def test_the_job_behind_is_admitted_only_when_the_current_one_succeeds():
    seen = []

    @job("celery_calls.behind", idempotency_key=lambda p: "behind", retry=Retry(attempts=1))
    def behind(ctx):
        if ctx.payload.get("last"):
            return "last"
        queued = behind.enqueue({"last": True}, after_current=True)
        seen.append((queued.pk, queued.state, queued.idempotency_key))
        # Not inserted yet: the running job still holds the key until it ends.
        seen.append(Job.objects.filter(kind="celery_calls.behind").count())
        if ctx.payload.get("fail"):
            raise RuntimeError("this attempt fails: nothing is admitted behind it")
        return "first"

    try:
        failing = behind.enqueue({"fail": True})
        run_until_idle()
        assert Job.objects.filter(kind="celery_calls.behind").count() == 1
        failing.refresh_from_db()
        assert failing.state == "failed"
        behind.enqueue({})
        run_until_idle()
        rows = list(Job.objects.filter(kind="celery_calls.behind").order_by("pk"))
        assert [r.result for r in rows] == [None, "first", "last"]
        assert seen[0] == (None, "queued", "behind") and seen[1] == 1
    finally:
        unregister("celery_calls.behind")


def test_after_current_outside_a_running_job_is_refused():
    with pytest.raises(ValueError, match="not inside a running job"):
        canvas_batch.enqueue({"name": "x", "left": 1}, after_current=True)


def test_a_plain_enqueue_of_the_same_key_outside_a_job_still_dedupes():
    with transaction.atomic():
        a = canvas_batch.enqueue({"name": "same", "left": 1})
        b = canvas_batch.enqueue({"name": "same", "left": 1})
    assert a.pk == b.pk and b.deduped
