"""The soft time limit interrupts the body, as Celery's ``SoftTimeLimitExceeded`` does: a plain
``def`` runner gets ``JobTimeout`` raised in its own thread at its next Python instruction
(``engine.deadlines``), within 0.2 s of the limit; code after the limit never runs; a runner
that catches it, cleans up and returns succeeds; an ``async def`` runner is cancelled. The
delivery never reaches the engine's own code after the body returned, nor the next job.

On the real clock (the limit is the subject): each test waits at most a few seconds.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from django_jobs import JobTimeout
from django_jobs.engine.run.deadlines import Guard, deadlines, timeout_class
from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.jobs import (
    async_sleeps_past_its_timeout,
    loops_past_its_timeout,
    noop,
    sleeps_past_its_timeout,
)
from testproject.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def labels(job: Job) -> list[str]:
    return list(Execution.objects.filter(job_id=job.pk).values_list("label", flat=True))


def test_a_pure_python_loop_gets_job_timeout_inside_within_0_2s_of_its_limit():
    queued = loops_past_its_timeout.enqueue({"catch": True})
    run_until_idle()
    queued.refresh_from_db()
    # It caught the JobTimeout, cleaned up and returned: it succeeds with what it returned.
    assert queued.state == "succeeded", queued.error
    landed = queued.result["landed_after"]
    assert 0.9 <= landed <= 1.2, landed
    assert labels(queued) == ["limits-loop-start", "limits-loop-cleanup"]


def test_a_loop_that_does_not_catch_it_fails_with_job_timeout():
    queued = loops_past_its_timeout.enqueue({"catch": False})
    run_until_idle()
    queued.refresh_from_db()
    assert queued.state == "failed"
    first = queued.error.splitlines()[0]
    assert first.startswith("JOB_TIMEOUT: ") and "ran past its timeout of 1s" in first
    assert "was stopped there" in first


def test_code_after_a_sleep_past_the_limit_never_runs():
    queued = sleeps_past_its_timeout.enqueue({})
    run_until_idle()
    queued.refresh_from_db()
    assert queued.state == "failed" and queued.error.startswith("JOB_TIMEOUT: ")
    # The JobTimeout landed as the sleep returned, before the effect.
    assert labels(queued) == ["limits-sleep-start"]


def test_an_async_runner_past_its_timeout_is_cancelled():
    queued = async_sleeps_past_its_timeout.enqueue({})
    began = time.monotonic()
    run_until_idle()
    assert time.monotonic() - began < 2.5  # cancelled at 1 s, not after its 3 s sleep
    queued.refresh_from_db()
    assert queued.state == "failed" and queued.error.startswith("JOB_TIMEOUT: ")
    assert labels(queued) == ["limits-async-start"]


def test_the_connection_is_usable_after_a_body_interrupted_mid_loop_and_the_next_job_runs():
    loops_past_its_timeout.enqueue({"catch": False})
    after = noop.enqueue({"after": "interrupted"})
    run_until_idle()
    after.refresh_from_db()
    assert after.state == "succeeded"
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


# -- the guard: never into the engine's code, never into the next job --------------------------


def test_a_closed_guard_is_never_delivered_to_nor_the_next_body_of_its_thread():
    guard = Guard()
    first = guard.begin()
    guard.close()
    assert guard.interrupt(first, timeout_class("late")) is False
    second = guard.begin()
    assert guard.interrupt(first, timeout_class("for the body before")) is False
    time.sleep(0.01)  # an exception set on this thread would land here
    guard.close()
    assert guard.interrupt(second, timeout_class("late")) is False


def test_an_exception_delivered_as_the_body_returned_is_taken_back_or_raised_by_close():
    # The timer delivers into a body that is returning: whatever the interleaving, the
    # exception is raised inside the guarded region (the body or close), never after it.
    guard = Guard()
    for _ in range(200):
        token = guard.begin()
        fired = threading.Event()

        def fire(token: int = token, fired: threading.Event = fired) -> None:
            guard.interrupt(token, timeout_class("at the limit"))
            fired.set()

        deadlines().at(time.monotonic(), guard, token, fire)
        try:
            try:
                for _ in range(1000):
                    pass
            finally:
                fired.wait(1.0)
                guard.close()
        except JobTimeout:
            pass
        # After the guard closed, nothing is pending for this thread.
        for _ in range(10_000):
            pass


def test_a_timer_entry_of_a_returned_body_is_skipped_and_the_heap_is_compacted():
    timer = deadlines()
    guard = Guard()
    for _ in range(3000):
        token = guard.begin()
        timer.at(
            time.monotonic() + 3600.0,
            guard,
            token,
            lambda: pytest.fail("a returned body was interrupted"),
        )
        guard.close()
        timer.returned()
    with timer.lock:
        assert len(timer.heap) < 3000
