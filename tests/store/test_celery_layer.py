"""``django_jobs.celery``: a Celery task, its options and its calls mean what Celery's
documentation says (attempt counts, delays, states, results, arguments)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import transaction
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.celery import AsyncResult, states
from django_jobs.celery.exceptions import MaxRetriesExceededError
from django_jobs.celery.exceptions import TimeoutError as CeleryTimeout
from django_jobs.celery.policy import backoff_interval
from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.shop import tasks

pytestmark = pytest.mark.django_db

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def seen():
    tasks.seen.clear()
    yield tasks.seen
    tasks.seen.clear()


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


def drain(clock, *, rounds: int = 20) -> list[timedelta]:
    """Run what is due, then move the clock to the next job's run_at, until nothing is left;
    return each wait the clock moved."""
    waits = []
    for _ in range(rounds):
        run_until_idle()
        nxt = Job.objects.filter(state="queued").order_by("run_at").first()
        if nxt is None:
            return waits
        wait = nxt.run_at - datetime.now(UTC)
        waits.append(wait)
        clock.shift(max(wait, timedelta(0)))
    raise AssertionError("still queued after every round")


def job_of(result: AsyncResult) -> Job:
    return Job.objects.get(pk=result.job.pk)


def test_a_task_is_a_kind_named_as_celery_names_it():
    assert tasks.add.name == "testproject.shop.tasks.add"
    assert tasks.total.name == "shop.tasks.total"
    assert tasks.add.handle.kind == tasks.add.name
    assert tasks.add(2, 3) == 5  # a plain call runs the body here, as Celery's task(...)


def test_delay_is_a_job_whose_result_the_async_result_reads(clock):
    result = tasks.add.delay(2, 3)
    assert result.state == states.PENDING and not result.ready()
    assert job_of(result).payload == {"args": [2, 3], "kwargs": {}}
    run_until_idle()
    assert result.state == states.SUCCESS and result.successful()
    assert result.get(timeout=1) == 5 and result.result == 5
    again = AsyncResult(result.id)
    assert again.get(timeout=0) == 5 and again == result


def test_no_retry_by_default_one_run_and_failure_raises_the_error(seen):
    result = tasks.boom.delay("sku-1")
    run_until_idle()
    assert seen == [("boom", "sku-1")]
    assert result.state == states.FAILURE and result.failed()
    with pytest.raises(KeyError, match="sku-1"):
        result.get(timeout=0)
    assert isinstance(result.get(timeout=0, propagate=False), KeyError)


def test_self_retry_countdown_and_max_retries_three_runs_four_times_then_raises_exc(clock, seen):
    result = tasks.charge.delay("A-1", 10)
    waits = drain(clock)
    assert [s[2] for s in seen] == [0, 1, 2, 3]  # max_retries=3: the first run and 3 retries
    assert waits == [timedelta(seconds=5)] * 3
    assert result.state == states.FAILURE
    with pytest.raises(ConnectionError, match="gateway timed out"):
        result.get(timeout=0)


def test_async_result_states_pending_started_retry_success(clock, seen):
    running = tasks.look.delay()
    assert running.state == states.PENDING
    run_until_idle()
    assert seen == [("look", states.STARTED, tasks.look.name)]
    assert running.state == states.SUCCESS
    retried = tasks.charge.delay("A-3", 1)
    run_until_idle()  # the first run asked for a retry in 5 s: not due yet
    assert retried.state == states.RETRY and not retried.ready()
    clock.shift(timedelta(seconds=5))
    run_until_idle()
    assert retried.state == states.SUCCESS


def test_a_retry_that_succeeds_ends_with_the_value(clock, seen):
    result = tasks.charge.delay("A-2", 2)
    drain(clock)
    assert [s[2] for s in seen] == [0, 1, 2]
    assert result.get(timeout=0) == {"order": "A-2", "charged": True}
    assert result.retries == 2


def test_retry_without_exc_waits_default_retry_delay_then_max_retries_exceeded(clock, seen):
    result = tasks.poll.delay("feed")
    waits = drain(clock)
    assert len(seen) == 3 and waits == [timedelta(seconds=30)] * 2
    with pytest.raises(MaxRetriesExceededError, match=r"Can't retry .*poll"):
        result.get(timeout=0)


def test_a_calls_own_max_retries_counts_above_the_tasks(clock, seen):
    result = tasks.stubborn.delay()
    drain(clock)
    assert [s[1] for s in seen] == [0, 1, 2, 3]
    assert result.state == states.FAILURE


def test_autoretry_for_with_backoff_waits_factor_times_two_to_the_retries_capped(clock, seen):
    result = tasks.fetch_rates.delay("EUR")
    waits = drain(clock)
    assert len(seen) == 5  # max_retries=4
    assert waits == [timedelta(seconds=s) for s in (2, 4, 8, 16)]
    with pytest.raises(ConnectionError):
        result.get(timeout=0)


def test_retry_backoff_max_caps_the_wait(clock, seen):
    tasks.fetch_capped.delay("GBP")
    waits = drain(clock)
    assert len(seen) == 5
    assert waits == [timedelta(seconds=s) for s in (2, 4, 5, 5)]


def test_autoretry_with_full_jitter_waits_between_zero_and_the_backoff(clock, seen):
    tasks.fetch_jittered.delay("USD")
    waits = drain(clock)
    assert len(seen) == 6  # max_retries=5
    # Full jitter: a retry may be due at once (run in the same round: no wait to see), and
    # none waits more than the largest backoff, 1 * 2**4 s.
    assert all(timedelta(0) < wait <= timedelta(seconds=16) for wait in waits)


@given(
    factor=st.integers(min_value=1, max_value=1000),
    retries=st.integers(min_value=0, max_value=40),
    maximum=st.integers(min_value=0, max_value=10**6),
)
def test_celerys_backoff_with_and_without_full_jitter(factor, retries, maximum):
    exact = min(maximum, factor * 2**retries)
    assert backoff_interval(factor, retries, maximum, full_jitter=False) == exact
    assert 0 <= backoff_interval(factor, retries, maximum, full_jitter=True) <= exact


def test_task_id_dedupes_a_live_call_and_nothing_else_does():
    first = tasks.add.apply_async((1, 2), task_id="order-7-total")
    again = tasks.add.apply_async((1, 2), task_id="order-7-total")
    assert first.id == again.id == "order-7-total"
    assert Job.objects.filter(kind=tasks.add.name).count() == 1
    tasks.add.delay(1, 2)
    tasks.add.delay(1, 2)
    assert Job.objects.filter(kind=tasks.add.name).count() == 3
    run_until_idle()
    assert AsyncResult("order-7-total").get(timeout=0) == 3


def test_celery_json_types_round_trip_through_the_payload_and_the_result():
    when = datetime(2026, 12, 7, 9, 30, tzinfo=UTC)
    ref = uuid.uuid4()
    result = tasks.stamp.delay(when, Decimal("12.30"), ref, day=date(2026, 12, 24))
    run_until_idle()
    assert tasks.seen == [("stamp", when, Decimal("12.30"), ref, date(2026, 12, 24))]
    assert result.get(timeout=0) == {
        "when": when,
        "amount": Decimal("12.30"),
        "ref": ref,
        "day": date(2026, 12, 24),
    }
    assert job_of(result).payload["args"][1] == {"__type__": "decimal", "__value__": "12.30"}


def test_a_value_celerys_json_refuses_is_refused_at_the_call():
    with pytest.raises(TypeError, match=r"not JSON.*its pk"):
        tasks.add.delay(object(), 1)
    assert not Job.objects.exists()


def test_arguments_the_body_cannot_take_fail_at_the_call_as_celerys_typing():
    with pytest.raises(TypeError, match="add"):
        tasks.add.delay(1, 2, 3)
    assert not Job.objects.exists()


def test_soft_time_limit_raises_soft_time_limit_exceeded_inside_the_body(seen):
    result = tasks.export.delay(0)
    run_until_idle()
    assert result.get(timeout=0) == "partial"
    assert seen and seen[0][:2] == ("export", "cleaned up")


def test_base_task_handlers_get_celerys_arguments(clock, seen):
    ok = tasks.audited.delay("B-1", None)
    drain(clock)
    assert seen == [
        ("on_success", {"order": "B-1"}, ok.id, ["B-1", None], {}),
        ("after_return", states.SUCCESS, ok.id),
    ]
    seen.clear()
    failed = tasks.audited.delay("B-2", "fail")
    drain(clock)
    assert seen == [
        ("on_failure", "KeyError", failed.id, ["B-2", "fail"], {}, True),
        ("after_return", states.FAILURE, failed.id),
    ]
    seen.clear()
    retried = tasks.audited.delay("B-3", "retry")
    drain(clock)
    assert seen[:2] == [
        ("on_retry", "ConnectionError", retried.id, ["B-3", "retry"], {}),
        ("after_return", states.RETRY, retried.id),
    ]
    assert seen[2][0] == "on_success"


def test_ignore_ends_the_job_without_a_result_and_reject_requeues_or_fails(clock, seen):
    skipped = tasks.skip.delay("C-1")
    run_until_idle()
    assert job_of(skipped).state == "cancelled" and skipped.state == states.REVOKED
    again = tasks.bounce.delay(True)
    drain(clock)
    assert again.get(timeout=0) == "second time"
    dropped = tasks.bounce.delay(False)
    drain(clock)
    assert job_of(dropped).state == "failed" and "rejected: not now" in job_of(dropped).error


def test_update_state_is_the_progress_async_result_reads_while_it_runs():
    result = tasks.report.delay(4)
    run_until_idle()
    job = job_of(result)
    assert job.progress["meta"] == {"current": 1, "total": 4}
    assert job.progress["percent"] == 25.0
    assert result.get(timeout=0) == 4


def test_ignore_result_stores_no_value():
    result = tasks.notify.delay("ann")
    run_until_idle()
    assert result.state == states.SUCCESS and result.get(timeout=0) is None


def test_queue_priority_and_expires_of_the_task_and_of_the_call(clock):
    result = tasks.mail.delay("ann@example.com")
    job = job_of(result)
    assert (job.queue, job.priority) == ("shop.mail", 5)
    assert job.expires_at == START + timedelta(seconds=60)
    other = tasks.mail.apply_async(("bo@example.com",), queue="shop.urgent", priority=9, expires=5)
    job = job_of(other)
    assert (job.queue, job.priority) == ("shop.urgent", 9)
    assert job.expires_at == START + timedelta(seconds=5)
    later = tasks.mail.apply_async(("cy@example.com",), countdown=90)
    assert job_of(later).run_at == START + timedelta(seconds=90)


def test_get_times_out_with_celerys_timeout_error():
    result = tasks.add.delay(1, 1)
    with pytest.raises(CeleryTimeout):
        result.get(timeout=0.01, interval=0.005)


def test_an_unknown_id_is_pending_as_in_celery():
    assert AsyncResult(str(uuid.uuid4())).state == states.PENDING


def test_revoke_cancels_a_queued_call():
    result = tasks.add.delay(1, 1)
    result.revoke()
    assert result.state == states.REVOKED
    with pytest.raises(NotImplementedError, match="terminate=True"):
        result.revoke(terminate=True)


def test_a_call_in_a_transaction_that_rolls_back_leaves_no_job():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.delay(1, 1)
        raise RuntimeError("rolled back")
    assert not Job.objects.exists()


def test_a_rabbitmq_projects_higher_priority_still_runs_first(settings):
    from testproject.shop.celery import app

    assert "broker_url" not in app.conf  # the test settings name no broker: read it now
    settings.CELERY_BROKER_URL = "amqp://guest@localhost//"  # RabbitMQ: a higher one first
    high = job_of(tasks.add.apply_async((1, 1), priority=9))
    low = job_of(tasks.add.apply_async((1, 1), priority=1))
    assert high.priority < low.priority  # here a lower number runs first: the order is kept
    settings.CELERY_BROKER_URL = "redis://localhost:6379/0"  # Redis: a lower one first, as here
    assert job_of(tasks.add.apply_async((1, 1), priority=9)).priority == 9


def test_current_task_is_the_running_task_and_false_outside_one():
    from django_jobs.celery import current_task

    assert not current_task
    with pytest.raises(RuntimeError, match="no task runs in this thread"):
        current_task.request  # noqa: B018


def test_throws_is_a_failure_logged_without_its_traceback(caplog):
    with caplog.at_level("INFO", logger="django_jobs.executor"):
        expected = tasks.lookup_order.delay("Z-1")
        unexpected = tasks.boom.delay("Z-2")
        run_until_idle()
    assert expected.state == unexpected.state == states.FAILURE
    lines = {r.getMessage().split(" (", 1)[0]: r.getMessage() for r in caplog.records}
    assert "Traceback" not in lines[f"Job {expected.id}"]
    assert "Traceback" in lines[f"Job {unexpected.id}"]
    assert "Traceback" in job_of(expected).error  # the stored error keeps it
