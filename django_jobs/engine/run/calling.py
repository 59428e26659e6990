"""Calling a kind's function for one attempt: a plain ``def`` or an ``async def``, within its
time limits.

The soft limit (``timeout=`` on ``@job``) tells the runner ``JobTimeout``; the hard one
(``runjobs --processes N`` only) stops the body and fails the attempt at once, whatever its
thread does next. A plain ``def`` runner gets them raised in its thread
(``engine.run.deadlines``); an ``async def`` one is cancelled on its loop
(``engine.run.loops``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from django.db import connections

from ... import clock
from ...durations import format_duration
from ...exceptions import JobTimeout
from ..observe.running import CURRENT
from ..observe.tracing import resume
from .context import JobContext, LiveState
from .deadlines import Guard, deadlines, thread_guard, timeout_class
from .loops import run_async

if TYPE_CHECKING:
    from ...kinds.handle import JobHandle

#: ``stopped_hard(ctx, exc)``: called in the timer thread when a body is stopped at its
#: kind's hard time limit, with the ``JobTimeout`` that says so.
StoppedHard = Callable[[JobContext, JobTimeout], None]


class Caller:
    """Calls the runners of one executor, each within its kind's time limits.

    ``inline``: an async runner's database calls run on the calling thread, on its own
    connection (``async_to_sync``). ``stopped_hard``: None when this process keeps no hard
    limit (``--processes 0``, ``run_until_idle``).
    """

    def __init__(self, *, inline: bool = False, stopped_hard: StoppedHard | None = None) -> None:
        self.inline = inline
        self.stopped_hard = stopped_hard
        self.hard_limits: dict[str, timedelta | None] = {}  # per kind, read once

    def call(
        self, handle: JobHandle, ctx: JobContext, running: LiveState, started: datetime
    ) -> Any:
        """What the runner returns; what it raises, or ``JobTimeout`` at a limit, propagates."""
        hard = self._hard_limit(handle) if self.stopped_hard is not None else None
        if handle.is_async:
            return self._call_async(handle, ctx, running, started, hard)
        if handle.timeout is None and hard is None:
            return handle.func(ctx)
        return self._call_limited(handle, ctx, started, hard)

    def _call_async(
        self,
        handle: JobHandle,
        ctx: JobContext,
        running: LiveState,
        started: datetime,
        hard: timedelta | None,
    ) -> Any:
        timeout = handle.timeout.total_seconds() if handle.timeout else None

        async def main() -> Any:
            CURRENT.set(running)  # the loop may run on another thread, in its own context
            resume(running)  # and so the attempt's span, when tracing
            try:
                # The hard limit cancels it too (its attempt is recorded failed then, by
                # ``_stop_hard``); the soft one inside says JobTimeout to the runner.
                async with asyncio.timeout(_left(started, hard)) as hard_limit:
                    async with asyncio.timeout(timeout) as limit:
                        value = await handle.func(ctx)
            except TimeoutError as exc:
                if hard is not None and hard_limit.expired():
                    raise JobTimeout(
                        f"stopped at its time limit of {format_duration(hard)}"
                    ) from exc
                raise handle.timeout_error(
                    f"Job #{ctx.job.pk} ran past its timeout of "
                    f"{format_duration(handle.timeout or timedelta())}; make it faster or raise "
                    "timeout= on @job."
                ) from exc
            if limit.expired():
                # The runner caught the cancellation the timeout raised in it and returned.
                ctx.live.timeout_raised = True
            return value

        if self.inline:
            # The runner's ``sync_to_async`` calls come back to this thread, to its connection.
            return async_to_sync(main)()
        if hard is None:
            return run_async(main)
        guard, timer = thread_guard(), deadlines()
        token = guard.begin()
        try:
            timer.at(
                time.monotonic() + (_left(started, hard) or 0.0),
                guard,
                token,
                lambda: self._stop_hard(guard, token, ctx, hard, interrupt=False),
            )
            return run_async(main)
        finally:
            guard.close()
            timer.returned()

    def _hard_limit(self, handle: JobHandle) -> timedelta | None:
        try:
            return self.hard_limits[handle.kind]
        except KeyError:
            limit = self.hard_limits[handle.kind] = handle.hard_limit
            return limit

    def _call_limited(
        self, handle: JobHandle, ctx: JobContext, started: datetime, hard: timedelta | None
    ) -> Any:
        """A plain ``def`` runner with a time limit: ``JobTimeout`` is raised in this thread
        at its soft limit, and again at its hard one (``engine.deadlines``). One entry in the
        timer at a time: the soft limit's, which, once past, arms the hard one's. The limits
        count from now, the runner's call, a moment after ``started``."""
        guard, timer = thread_guard(), deadlines()
        token = guard.begin()
        now = time.monotonic()
        hard_at = now + hard.total_seconds() if hard is not None else None
        try:
            try:
                if handle.timeout is not None:
                    timer.at(
                        now + handle.timeout.total_seconds(),
                        guard,
                        token,
                        lambda: self._stop_soft(guard, token, ctx, handle, hard, hard_at),
                    )
                elif hard is not None and hard_at is not None:
                    timer.at(
                        hard_at, guard, token, lambda: self._stop_hard(guard, token, ctx, hard)
                    )
                return handle.func(ctx)
            finally:
                guard.close()
                timer.returned()
        finally:
            if guard.delivered:
                _settle_connections()

    def _stop_soft(
        self,
        guard: Guard,
        token: int,
        ctx: JobContext,
        handle: JobHandle,
        hard: timedelta | None,
        hard_at: float | None,
    ) -> None:
        """At the soft limit (in the timer thread): ``JobTimeout`` (the kind's
        ``timeout_error``) raised in the body; then the hard limit's watch, if any."""

        def told() -> None:
            ctx.live.timeout_raised = True

        exc_class = timeout_class(
            f"Job #{ctx.job.pk} ran past its timeout of "
            f"{format_duration(handle.timeout or timedelta())} and was stopped there; make it "
            "faster or raise timeout= on @job (a runner that catches this, cleans up and "
            "returns succeeds with what it returns).",
            handle.timeout_error,
        )
        if guard.interrupt(token, exc_class, told) and hard is not None and hard_at is not None:
            deadlines().at(hard_at, guard, token, lambda: self._stop_hard(guard, token, ctx, hard))

    def _stop_hard(
        self,
        guard: Guard,
        token: int,
        ctx: JobContext,
        limit: timedelta,
        *,
        interrupt: bool = True,
    ) -> None:
        """At the hard limit: the body stopped (a plain ``def`` one gets ``JobTimeout``) and
        its attempt failed now, whatever the thread does next (``stopped_hard`` records it)."""
        message = f"stopped at its time limit of {format_duration(limit)}"
        if not guard.interrupt(token, timeout_class(message) if interrupt else None):
            return  # it returned first: its own outcome stands
        assert self.stopped_hard is not None
        self.stopped_hard(ctx, JobTimeout(message))


def _left(started: datetime, limit: timedelta | None) -> float | None:
    """Seconds from now until ``limit`` after ``started`` (None: no limit)."""
    if limit is None:
        return None
    return max((started + limit - clock.now()).total_seconds(), 0.0)


def _settle_connections() -> None:
    """After a body was interrupted: this thread's connections may have been left inside a
    query (the exception lands in the driver's Python code as readily as in the runner's), so
    each is closed and the next use connects afresh. One inside an atomic block belongs to
    the caller (a test's transaction around ``run_until_idle``): its owner ends it."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()
