"""Async runners run side by side, each executor thread's database calls on its own connection.

A worker's executor threads each run one job; an async runner's ``sync_to_async`` calls
(``step.arun``, ``aatomic``, ``aenqueue``) come back to the thread running it. If they all
queued for one shared thread instead, async jobs would take turns in every database call.
"""

from __future__ import annotations

import asyncio
import threading

from django.db import connection
from django.test import TestCase, TransactionTestCase

from django_jobs import Retry, job
from django_jobs.engine.worker import Worker
from django_jobs.models import Job, JobStep
from django_jobs.registry import unregister
from django_jobs.testing import run_until_idle
from tests.integration.test_events import needs_file_database

TOGETHER = 4


class AsyncJobsRunSideBySideTests(TransactionTestCase):
    def setUp(self) -> None:
        needs_file_database()
        # Every activity waits inside its step until all of them are inside theirs: only jobs
        # whose steps run at the same time get past it.
        self.barrier = threading.Barrier(TOGETHER, timeout=30)
        barrier = self.barrier

        @job("unit.async.together", idempotency_key="payload", retry=Retry(attempts=1))
        async def together(ctx):
            def meet() -> int:
                barrier.wait()
                return threading.get_ident()

            thread = await ctx.step.arun("meet", meet)
            await asyncio.sleep(0)
            await ctx.step.aatomic("after", lambda: {"thread": thread})
            return thread

        self.together = together

    def tearDown(self) -> None:
        unregister("unit.async.together")

    def test_their_steps_run_at_the_same_time_on_the_executor_threads(self):
        jobs = self.together.enqueue_many([{"n": n} for n in range(TOGETHER)])
        Worker(concurrency=TOGETHER, burst=True, scheduler=False).run()

        ended = Job.objects.filter(pk__in=[j.pk for j in jobs])
        assert sorted(ended.values_list("state", flat=True)) == ["succeeded"] * TOGETHER, [
            j.error for j in ended
        ]
        threads = {j.result for j in ended}
        assert len(threads) == TOGETHER  # each job's activity ran on a thread of its own
        assert threading.get_ident() not in threads
        steps = JobStep.objects.filter(job__in=ended, name="after")
        assert sorted(s.value["thread"] for s in steps) == sorted(threads)


class AsyncRunnerInATestCaseTests(TestCase):
    def test_its_database_calls_see_the_tests_transaction(self):
        # run_until_idle runs the async runner in this thread's context: its steps write on
        # the test's own connection, inside the test's transaction.
        @job("unit.async.inline", idempotency_key="payload")
        async def inline(ctx):
            value = await ctx.step.arun("read", lambda: Job.objects.filter(pk=ctx.job.pk).count())
            return {"seen": value, "vendor": connection.vendor}

        try:
            queued = inline.enqueue({"n": 1})
            [ran] = run_until_idle()
            assert ran.pk == queued.pk and ran.state == "succeeded"
            assert ran.result["seen"] == 1
            assert JobStep.objects.get(job=ran, name="read").value == 1
        finally:
            unregister("unit.async.inline")
