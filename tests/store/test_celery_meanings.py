"""What a Celery codebase relies on keeps its meaning: equal members of a group are three
jobs, a flow runs on its members' queue, a caught soft time limit succeeds, ``Retry(on=)``
retries only the listed types, a spent timeout says ``JOB_TIMEOUT`` first, hooks can read the
traceback, and a job that enqueues itself with the same arguments fails on the first loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from django_jobs import Retry, chain, group, job
from django_jobs.canvas import FLOW_KIND
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.jobs import canvas_add, canvas_batch, canvas_echo, canvas_total
from testproject.models import Execution

pytestmark = pytest.mark.django_db

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def kinds():
    """Register kinds for one test; unregistered after it."""
    made: list[str] = []

    def register(kind: str, **options):
        def decorate(func):
            made.append(kind)
            return job(kind, idempotency_key="payload", **options)(func)

        return decorate

    yield register
    for kind in made:
        unregister(kind)


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


# -- 1. every signature is its own member ------------------------------------------------------


def test_a_group_of_three_equal_members_runs_three_jobs_and_the_chord_gets_three_results():
    flow = chain(
        group(canvas_add.s({"n": 5}), canvas_add.s({"n": 5}), canvas_add.s({"n": 5})),
        canvas_total.s({}),
    ).enqueue()
    run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "succeeded", flow.error
    assert flow.result == {"sum": 15, "count": 3}
    members = Job.objects.filter(kind="canvas.add")
    assert members.count() == 3 and {m.state for m in members} == {"succeeded"}
    assert Execution.objects.filter(label="canvas.add:5").count() == 3
    # Each is keyed by its place in its flow, so none dedupes against another.
    assert len({m.idempotency_key for m in members}) == 3


def test_equal_links_of_a_chain_each_run():
    flow = chain(canvas_echo.s({"same": 1}), canvas_echo.s({"same": 1})).enqueue()
    run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "succeeded", flow.error
    kids = list(Job.objects.filter(parent_id=flow.pk).order_by("pk"))
    assert len(kids) == 2
    assert kids[1].result["previous"] == kids[0].result


def test_the_flow_key_still_dedupes_the_flow():
    canvas = group(canvas_add.s({"n": 1}), canvas_add.s({"n": 1}))
    first = canvas.enqueue()
    again = canvas.enqueue()
    assert again.pk == first.pk and again.deduped is True


# -- 2. the flow runs on its first member's queue, and its expires reaches the members ----------


def test_a_flow_runs_on_its_first_members_queue_unless_told():
    flow = chain(canvas_add.s({"n": 1}, queue="webhooks"), canvas_add.s({"n": 2})).enqueue()
    assert flow.queue == "webhooks" and flow.engine == canvas_add.engine
    nested = group(chain(canvas_echo.s({"a": 1}, queue="media")), canvas_add.s({"n": 3})).enqueue()
    assert nested.queue == "media"
    plain = group(canvas_add.s({"n": 4})).enqueue()
    assert plain.queue == canvas_add.queue
    told = chain(canvas_add.s({"n": 5}, queue="webhooks")).enqueue(queue="flows")
    assert told.queue == "flows"


def test_a_worker_of_the_members_queue_alone_finishes_the_flow():
    flow = chain(
        canvas_add.s({"n": 1}, queue="webhooks"), canvas_add.s({"n": 2}, queue="webhooks")
    ).enqueue()
    run_until_idle(queues=["webhooks"])
    flow.refresh_from_db()
    assert flow.state == "succeeded" and flow.result == 3


def test_the_flows_expires_applies_to_each_member_not_started_by_then(clock):
    flow = group(canvas_add.s({"n": 1}), canvas_add.s({"n": 2}, expires="1h")).enqueue(
        expires="10m"
    )
    assert flow.expires_at == START + timedelta(minutes=10)
    run_until_idle(max_jobs=1)  # the flow spawns its members, which have not started
    members = list(Job.objects.filter(parent_id=flow.pk).order_by("pk"))
    assert [m.expires_at for m in members] == [flow.expires_at] * 2
    clock.shift(timedelta(minutes=11))
    run_until_idle()
    for member in members:
        member.refresh_from_db()
        assert member.state == "cancelled" and "expired" in member.error
    assert not Execution.objects.filter(label__startswith="canvas.add").exists()


def test_a_members_own_earlier_expires_is_kept(clock):
    flow = group(canvas_add.s({"n": 1}, expires="1m")).enqueue(expires="10m")
    run_until_idle(max_jobs=1)
    member = Job.objects.get(parent_id=flow.pk)
    assert member.expires_at == START + timedelta(minutes=1)


# -- 3. the soft time limit ----------------------------------------------------------------------


def test_a_runner_that_catches_job_timeout_and_returns_succeeds_with_its_value(kinds, clock):
    from django_jobs import JobTimeout

    @kinds("meanings.soft", timeout="2s", retry=Retry(attempts=3, delay=0))
    def soft(ctx):
        clock.shift(timedelta(seconds=3))
        try:
            ctx.check_cancelled()
        except JobTimeout:
            return {"cleaned": True}
        return {"cleaned": False}

    queued = soft.enqueue({})
    ran = run_until_idle()
    queued.refresh_from_db()
    assert queued.state == "succeeded", queued.error
    assert queued.result == {"cleaned": True} and queued.attempts == 1 and len(ran) == 1


def test_a_runner_that_never_looks_at_its_timeout_still_fails_it(kinds, clock):
    @kinds("meanings.deaf", timeout="2s", retry=Retry(attempts=1))
    def deaf(ctx):
        clock.shift(timedelta(seconds=3))
        return "late"

    queued = deaf.enqueue({})
    run_until_idle()
    queued.refresh_from_db()
    assert queued.state == "failed"
    assert queued.error.startswith("JOB_TIMEOUT: ")
    assert "ran past its timeout of 2s" in queued.error.splitlines()[0]


def test_an_async_runner_that_catches_its_cancellation_and_returns_succeeds(kinds):
    @kinds("meanings.async_soft", timeout=0.05, retry=Retry(attempts=1))
    async def async_soft(ctx):
        try:
            await asyncio.Event().wait()  # never set: only the timeout ends it
        except asyncio.CancelledError:
            return "cleaned up"

    queued = async_soft.enqueue({})
    run_until_idle()
    queued.refresh_from_db()
    assert queued.state == "succeeded", queued.error
    assert queued.result == "cleaned up"


# -- 4. Retry(on=) as autoretry_for ---------------------------------------------------------------


class SMTPError(Exception):
    pass


def test_retry_on_retries_only_the_listed_types_and_their_subclasses(kinds):
    attempts: list[str] = []

    @kinds(
        "meanings.send",
        retry=Retry(attempts=3, delay=0, jitter=False, on=(ConnectionError, SMTPError)),
    )
    def send(ctx):
        attempts.append(ctx.payload["raise"])
        if ctx.attempt < 3:
            raise {"conn": ConnectionResetError, "smtp": SMTPError, "value": ValueError}[
                ctx.payload["raise"]
            ]("no")
        return "sent"

    flaky = send.enqueue({"raise": "conn"})  # ConnectionResetError is a ConnectionError
    smtp = send.enqueue({"raise": "smtp"})
    bad = send.enqueue({"raise": "value"})
    run_until_idle()
    for retried in (flaky, smtp):
        retried.refresh_from_db()
        assert retried.state == "succeeded" and retried.attempts == 3
    bad.refresh_from_db()
    assert bad.state == "failed" and bad.attempts == 1
    first = bad.error.splitlines()[0]
    assert first.startswith("NOT_RETRIED: ValueError is not retried")
    assert "Retry(on=(ConnectionError, SMTPError))" in first and "'meanings.send'" in first
    assert "ValueError: no" in bad.error
    assert attempts.count("value") == 1  # its side effects happened once


def test_retry_on_refuses_what_is_not_an_exception_type():
    with pytest.raises(ValueError, match="autoretry_for"):
        Retry(on=("ConnectionError",))
    with pytest.raises(ValueError, match="exception class"):
        Retry(on=())
    assert Retry().on == (Exception,)
    assert Retry(on=KeyError).as_json()["on"] == ["KeyError"]


# -- 5. a timeout says so, also when the attempts are spent ----------------------------------


def test_a_spent_timeout_says_job_timeout_on_its_first_line(kinds, clock):
    @kinds("meanings.slow", timeout="10m", retry=Retry(attempts=2, delay=0, jitter=False))
    def slow(ctx):
        clock.shift(timedelta(minutes=11))
        ctx.check_cancelled()

    queued = slow.enqueue({})
    run_until_idle()
    queued.refresh_from_db()
    assert queued.state == "failed" and queued.attempts == 2
    lines = queued.error.splitlines()
    assert lines[0].startswith("JOB_TIMEOUT: ") and "10m" in lines[0]
    assert lines[1].startswith("MAX_ATTEMPTS: Retries are spent after 2 attempt(s)")


def test_max_attempts_quotes_the_last_errors_first_line(kinds):
    @kinds("meanings.broken", retry=Retry(attempts=2, delay=0, jitter=False))
    def broken(ctx):
        raise KeyError("sku-42")

    queued = broken.enqueue({})
    run_until_idle()
    queued.refresh_from_db()
    first = queued.error.splitlines()[0]
    assert first.startswith("MAX_ATTEMPTS: Retries are spent after 2 attempt(s)")
    assert "(last error: KeyError: 'sku-42')" in first


# -- 6. hooks read the traceback; a self-enqueue loop fails on its first call ---------------------


def test_an_on_failure_hook_reads_the_formatted_traceback_on_job_error(kinds):
    seen: list[str] = []

    def on_failure(job, exc):
        seen.append(job.error)

    @kinds("meanings.hooked", retry=Retry(attempts=1), on_failure=on_failure)
    def hooked(ctx):
        raise RuntimeError("disk full")

    hooked.enqueue({})
    run_until_idle()
    assert len(seen) == 1
    assert "RuntimeError: disk full" in seen[0]
    assert "Traceback" in seen[0] and 'raise RuntimeError("disk full")' in seen[0]


def test_a_self_enqueue_with_the_same_arguments_fails_on_the_first_call(kinds):
    @kinds("meanings.loop", retry=Retry(attempts=3, delay=0))
    def loop(ctx):
        Execution.objects.create(job_id=ctx.job.pk, label="loop", attempt=ctx.attempt)
        loop.enqueue(ctx.payload)  # the same arguments again: a loop without after_current

    # Its first run holds a key of its own (as a schedule's occurrence does), not the payload's.
    first = loop.enqueue({"page": 1}, idempotency_key="nightly:2026-06-01")
    run_until_idle()
    first.refresh_from_db()
    assert first.state == "failed" and first.attempts == 1  # no attempt spent on retrying it
    assert "JobDuplicate" in first.error and "after_current=True" in first.error
    assert "enqueueing itself with the same payload" in first.error
    assert Job.objects.filter(kind="meanings.loop").count() == 1
    assert Execution.objects.filter(label="loop").count() == 1


def test_a_batch_loop_with_new_arguments_is_not_mistaken_for_a_repeat():
    canvas_batch.enqueue({"name": "pages", "left": 3})
    run_until_idle()
    assert (
        sorted(Job.objects.filter(kind="canvas.batch").values_list("state", flat=True))
        == ["succeeded"] * 3
    )


def test_the_flow_kind_is_still_registered_on_the_default_engine():
    from django_jobs.kinds.registry import lookup

    assert lookup(FLOW_KIND).engine == "default"
