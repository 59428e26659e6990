"""Async runners run side by side, each executor thread's database calls on its own connection.

A worker's executor threads each run one job; an async runner's ``sync_to_async`` calls
(``step.arun``, ``aatomic``, ``aenqueue``) come back to the thread running it. If they all
queued for one shared thread instead, async jobs would take turns in every database call.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading

from asgiref.sync import sync_to_async
from django.db import OperationalError, connection
from django.test import TestCase, TransactionTestCase

from django_jobs import Retry, job
from django_jobs.engine.run.loops import ThreadLoop
from django_jobs.engine.worker.worker import Worker
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobStep
from django_jobs.testing import run_until_idle
from tests.conftest import on_postgres
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


class ThreadLoopTests(TransactionTestCase):
    """An executor thread's loop: its jobs' database calls go to its database thread, each
    job starts from the same context, and the connection a job broke is replaced."""

    def setUp(self) -> None:
        needs_file_database()
        self.loop = ThreadLoop()

    def tearDown(self) -> None:
        self.loop.close()

    def run_job(self, job):
        return self.loop.run(job)

    def test_database_calls_run_on_the_loops_database_thread_job_after_job(self):
        async def where() -> str:
            return await sync_to_async(lambda: threading.current_thread().name)()

        first, second = self.run_job(where), self.run_job(where)
        assert first == second
        assert first.startswith(threading.current_thread().name + "-db")

    def test_a_context_variable_set_by_a_job_is_not_seen_by_the_next(self):
        seen = contextvars.ContextVar("seen", default="unset")

        async def look_then_set() -> str:
            before = seen.get()
            seen.set("set by a job")
            return before

        assert self.run_job(look_then_set) == "unset"
        assert self.run_job(look_then_set) == "unset"

    def test_a_task_left_behind_is_cancelled_and_the_next_job_still_reaches_the_database(self):
        started = []

        async def leave_a_task() -> None:
            async def forever() -> None:
                started.append(True)
                await asyncio.Event().wait()

            asyncio.get_running_loop().create_task(forever())
            await asyncio.sleep(0)

        async def count() -> int:
            return await sync_to_async(Job.objects.count)()

        self.run_job(leave_a_task)
        assert started == [True]
        assert not [t for t in asyncio.all_tasks(self.loop.loop) if t is not self.loop._holder]
        assert self.run_job(count) == 0

    def test_a_connection_broken_in_one_job_is_replaced_before_the_next_uses_it(self):
        if not on_postgres():
            self.skipTest("ends the database thread's server connection (PostgreSQL)")

        def end_own_connection() -> None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                [(pid,)] = cursor.fetchall()
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

        async def break_it() -> str:
            try:
                await sync_to_async(end_own_connection)()  # its statement fails as it ends
            except OperationalError as exc:
                return type(exc).__name__
            return "not broken"

        async def count() -> int:
            return await sync_to_async(Job.objects.count)()

        assert self.run_job(break_it) == "OperationalError"
        assert self.run_job(count) == 0
