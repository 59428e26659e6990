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
for sync no-ops in the same run. 100 jobs that each ``await asyncio.sleep(0.2)`` took 0.48 s.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from asgiref.sync import ThreadSensitiveContext
from django.db import connections

T = TypeVar("T")


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


class ThreadLoop:
    """The calling thread's event loop, and the thread its async jobs' database calls use."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        name = threading.current_thread().name
        self.database = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-db")

    def run(self, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job()`` to its end on this loop; tasks it left behind are cancelled."""
        # Queued before the job's own calls on the one database thread: a connection that
        # broke in the previous job is replaced first, as an executor thread does for itself.
        self.database.submit(drop_broken_connections)

        async def main() -> T:
            async with ThreadSensitiveContext(executor=self.database):
                return await job()

        try:
            return self.loop.run_until_complete(main())
        finally:
            self._cancel_leftovers()

    def _cancel_leftovers(self) -> None:
        leftovers = asyncio.all_tasks(self.loop)
        for task in leftovers:
            task.cancel()
        if leftovers:
            self.loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))

    def close(self) -> None:
        self.database.submit(connections.close_all).result()
        self.database.shutdown()
        self.loop.close()


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


__all__ = ["ThreadLoop", "close_thread_loop", "drop_broken_connections", "run_async"]
