"""Event loops for async runners, one per executor thread, kept from job to job.

An executor thread runs one job at a time. For an async runner it keeps an event loop and one
more thread for that runner's database calls: every thread-sensitive ``sync_to_async`` call
the runner makes (``step.arun``, ``aatomic``, ``aenqueue``, or its own ORM calls) runs there, on
that thread's own connection. So the worker's async jobs run side by side, each executor
thread with its own; under ``asyncio.run`` their calls all queued for asgiref's one shared
thread, and a no-op async job cost a new loop besides.

Why a loop kept per thread, measured with ``python -m bench --only async`` (1,000 no-op jobs at
concurrency 50, PostgreSQL, one run each on a loaded 2-core machine; docs/performance.md): a
new loop per job through ``async_to_sync`` drained 762 jobs/s; ``asyncio.run`` per job 3,657/s
(its database calls one at a time for the whole worker); the kept loop 3,518/s, beside 4,195/s
for sync no-ops in the same run. On the quiet machine, three runs each: the kept loop entering
its ``ThreadSensitiveContext`` per job 2,386/s beside 6,533/s sync (0.37); entered once per
loop (``ThreadLoop``) 4,925/s beside 7,098/s (0.72). 100 jobs that each
``await asyncio.sleep(0.2)`` take 0.44 s.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from asgiref.sync import ThreadSensitiveContext
from django.db import connections

if TYPE_CHECKING:
    from ...store import Store

T = TypeVar("T")
P = ParamSpec("P")


def drop_broken_connections() -> None:
    """Close this thread's connections that broke, keep the healthy ones open.

    Unlike ``close_old_connections``, a worker thread keeps its connections between jobs even
    with ``CONN_MAX_AGE = 0``: reconnecting for every job would cost more than a no-op job.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()


class DatabaseThread(ThreadPoolExecutor):
    """The one thread an async job's database calls run on (``max_workers=1``).

    Before the first call of each job (``check_due``, set by ``ThreadLoop.run``), it drops the
    connections that broke in an earlier job, as an executor thread does for itself between
    jobs; a job that makes no database call costs no hand-off to this thread.
    """

    def __init__(self, name: str) -> None:
        super().__init__(max_workers=1, thread_name_prefix=f"{name}-db")
        # Read and written on the loop's thread only (``submit`` is called from the loop).
        self.check_due = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self.check_due:
            self.check_due = False
            return super().submit(_checked, fn, *args, **kwargs)
        return super().submit(fn, *args, **kwargs)


def _checked(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    drop_broken_connections()
    return fn(*args, **kwargs)


class ThreadLoop:
    """The calling thread's event loop, and the thread its async jobs' database calls use.

    The ``ThreadSensitiveContext`` that sends those calls to the database thread is entered
    once, by a task that lives as long as the loop (``_hold_context``); each job runs as a
    task in a copy of that task's context. Entering it per job cost more than a no-op async
    job itself: its ``Local`` reads take one lock shared by every thread of the process
    (measured with py-spy on ``runjobs --concurrency 50``, 5,000 async no-ops: the context's
    enter and exit were about a quarter of the worker's busy samples, the per-job hand-off
    of the connection check to the database thread a sixth).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.database = DatabaseThread(threading.current_thread().name)
        self._release = asyncio.Event()
        entered: asyncio.Future[contextvars.Context] = self.loop.create_future()
        self._holder = self.loop.create_task(self._hold_context(entered))
        self.context = self.loop.run_until_complete(entered)

    async def _hold_context(self, entered: asyncio.Future[contextvars.Context]) -> None:
        async with ThreadSensitiveContext(executor=self.database):
            entered.set_result(contextvars.copy_context())
            await self._release.wait()

    def run(self, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job()`` to its end on this loop; tasks it left behind are cancelled."""
        self.database.check_due = True
        task = self.loop.create_task(_await(job), context=self.context.copy())
        try:
            return self.loop.run_until_complete(task)
        finally:
            self._cancel_leftovers()

    def _cancel_leftovers(self) -> None:
        leftovers = asyncio.all_tasks(self.loop) - {self._holder}
        for task in leftovers:
            task.cancel()
        if leftovers:
            self.loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))

    def close(self) -> None:
        self._release.set()
        self.loop.run_until_complete(self._holder)
        self.database.submit(connections.close_all).result()
        self.database.shutdown()
        self.loop.close()


async def _await(job: Callable[[], Awaitable[T]]) -> T:
    return await job()


_local = threading.local()


def run_async(job: Callable[[], Awaitable[T]]) -> T:
    """Run ``job()`` on the calling thread's ``ThreadLoop`` (made on first use)."""
    loop: ThreadLoop | None = getattr(_local, "loop", None)
    if loop is None:
        loop = _local.loop = ThreadLoop()
    return loop.run(job)


def close_thread_loop() -> None:
    """Close the calling thread's loop and its database thread's connections, if it has them.

    An executor thread calls this as it ends."""
    loop: ThreadLoop | None = getattr(_local, "loop", None)
    if loop is not None:
        _local.loop = None
        loop.close()


__all__ = [
    "DatabaseThread",
    "ThreadLoop",
    "close_thread_loop",
    "drop_broken_connections",
    "run_async",
]


def bound_silent_network(store: Store) -> None:
    """Give this process's connections to the store's alias the options its store sets for
    long-running workers (``Store.worker_connection_options``), the project's own first."""
    options = store.connection.settings_dict.setdefault("OPTIONS", {})
    for name, value in store.worker_connection_options.items():
        options.setdefault(name, value)
