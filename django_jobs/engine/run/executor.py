"""Run one claimed job as named stages and turn what happened into an ``Outcome``.

resolve the runner -> check version and payload -> run (sync or async, with its timeout)
-> classify the return value or exception. Nothing here writes the outcome: the caller does,
in batches (the worker) or at once (``run_until_idle``).

The stages' parts: ``calling.py`` calls the runner within its time limits, ``outcome.py``
turns what it returned or raised into the ``Outcome``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ... import clock
from ...durations import format_duration
from ...exceptions import Cancelled, InvalidPayload, JobTimeout, UnknownKind
from ...kinds.registry import get
from ...states import JobState
from ...store import Outcome
from ..observe.records import install_log_fields
from ..observe.running import CURRENT
from ..observe.tracing import processing
from .calling import Caller
from .context import JobContext, LiveState
from .outcome import ERROR_CAP, Outcomes, cap_error, describe_exception

if TYPE_CHECKING:
    from ...kinds.handle import JobHandle
    from ...models import Job

logger = logging.getLogger("django_jobs.executor")

__all__ = [
    "ERROR_CAP",
    "Executor",
    "HardStop",
    "cap_error",
    "describe_exception",
    "hang_grace",
]

#: ``hard_stop(job, live, outcome)``: see ``Executor``.
HardStop = Callable[["Job", LiveState, Outcome], None]


def hang_grace(timeout: timedelta) -> timedelta:
    """How long past its timeout a sync runner may go on before the worker gives up on it.

    A quarter of the timeout, between 1 second and 1 minute: time for a runner that checks
    ``ctx.cancelled`` to see it and stop by itself.
    """
    return min(max(timeout / 4, timedelta(seconds=1)), timedelta(minutes=1))


class Executor:
    """Runs jobs for one worker (or, ``inline``, for ``run_until_idle`` and ``jobs drain``).

    ``inline``: an async runner's database calls run on the calling thread, on its own
    connection, so a test's transaction holds them too. Otherwise each executor thread keeps
    an event loop and a database thread of its own for its async jobs (``engine.loops``).

    One attempt's stages: ``run`` (a cancel that came first; the attempt's span) ->
    ``_resolve`` (the kind, its version, the payload) -> ``_perform`` (the runner, through
    ``Caller``) -> the ``Outcome`` (``Outcomes``) -> ``_attempt`` (a cancel that came
    meanwhile).
    """

    def __init__(
        self,
        worker_id: str,
        *,
        inline: bool = False,
        hard_stop: HardStop | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.inline = inline
        #: Under a supervisor: called (in the timer thread) when a body is stopped at its
        #: kind's hard time limit, with the attempt's failed outcome to record now. None: no
        #: hard limit in this process (``--processes 0``, ``run_until_idle``).
        self.hard_stop = hard_stop
        self.outcomes = Outcomes(worker_id)
        self.caller = Caller(
            inline=inline, stopped_hard=self._stopped_hard if hard_stop is not None else None
        )
        install_log_fields()  # the log records made while a job runs carry its fields

    def run(
        self, job: Job, live: LiveState | None = None, started: datetime | None = None
    ) -> Outcome:
        """Run one attempt of ``job`` to its outcome. ``started``: when the attempt began (see
        ``begin_attempt``), now if not given."""
        live = live or LiveState(job)
        started = started or clock.now()
        if live.cancel_requested:
            # Cancelled while it waited for its turn (in the worker's local queue, or queued
            # again after a request that came as an attempt ended): the runner never starts.
            return self.outcomes.cancelled(
                job,
                started,
                live,
                f"Job #{job.pk} was cancelled before its runner started.",
            )
        with processing(job, live) as span:  # the attempt's span, when tracing
            outcome = self._attempt(job, live, started)
            span.ended(outcome, live.exc)
        return outcome

    def _attempt(self, job: Job, live: LiveState, started: datetime) -> Outcome:
        outcome = self._run(job, live, started)
        if live.cancel_requested and (
            outcome.state in (JobState.QUEUED, JobState.WAITING)
            or (outcome.state == JobState.SUCCEEDED and live.cancel_seen)
        ):
            # A cancelled job does not go on (no retry, no wait), and a runner that saw
            # ``ctx.cancelled`` and returned stopped because of it: the job ends
            # ``cancelled``, what it returned kept as its result.
            outcome.state, outcome.run_at, outcome.wait_reason = JobState.CANCELLED, None, None
            outcome.error = cap_error(
                f"{Cancelled.code}: Job #{job.pk} was cancelled while it ran; its runner "
                "stopped." + (f"\nIts last error: {outcome.error}" if outcome.error else "")
            )
        return outcome

    def _run(self, job: Job, live: LiveState, started: datetime) -> Outcome:
        resolved = self._resolve(job, started)
        if isinstance(resolved, Outcome):
            return resolved
        handle, payload = resolved
        return self._perform(job, handle, payload, live, started)

    def _resolve(self, job: Job, started: datetime) -> tuple[JobHandle, Any] | Outcome:
        """The kind's handle and the validated payload, or the ``blocked`` outcome of a job
        this worker cannot run: its kind unknown here, another version, a payload that no
        longer validates."""
        handle = get(job.kind)
        if handle is None:
            return self.outcomes.refused(
                job,
                started,
                JobState.BLOCKED,
                f"Kind {job.kind!r} is not registered in the worker that claimed it (pid "
                f"{os.getpid()}). A worker runs the code it started with: if the kind was added "
                "since, restart the workers (or send runjobs SIGHUP; in development, "
                "runjobs --reload restarts them on code changes), then retry the job. "
                "Otherwise deploy code that defines it, or cancel the job.",
            )
        if (job.version or "") != (handle.version or ""):
            return self.outcomes.refused(
                job,
                started,
                JobState.BLOCKED,
                f"The job was admitted for version {job.version!r} of {job.kind!r}; the code is "
                f"version {handle.version!r}. Migrate or cancel the job, or retry it to run it "
                "with the current code.",
            )
        try:
            payload = handle.validate_payload(job.payload)
        except (InvalidPayload, UnknownKind) as exc:  # a flow's member kind may be gone
            return self.outcomes.refused(
                job,
                started,
                JobState.BLOCKED,
                f"The stored payload no longer validates: {exc.message} Fix it or cancel the job.",
            )
        return handle, payload

    def _perform(
        self, job: Job, handle: JobHandle, payload: Any, live: LiveState, started: datetime
    ) -> Outcome:
        """Call the runner with its ``ctx``, then classify what it returned or raised."""
        if handle.timeout is not None:
            live.deadline, live.timeout = started + handle.timeout, handle.timeout
        live.hooks = handle.hooks
        ctx = JobContext(job, payload, live)
        token = CURRENT.set(live)
        try:
            value = self.caller.call(handle, ctx, live, started)
            if ctx.timed_out and handle.timeout is not None and not live.timeout_raised:
                # Past its soft limit without being told: the attempt fails, as a Celery task
                # that never caught SoftTimeLimitExceeded. One that caught the JobTimeout
                # raised to it and returned cleaned up and succeeds with what it returned.
                raise JobTimeout(
                    f"Job #{job.pk} ran past its timeout of {format_duration(handle.timeout)}; "
                    "make it faster, raise timeout= on @job, or check ctx.cancelled in long "
                    "loops."
                )
        except KeyboardInterrupt:
            raise  # as in Django's Tasks: only an interrupt propagates (the worker copes)
        except BaseException as exc:  # every other failure, SystemExit too, becomes an outcome
            return self.outcomes.of_exception(job, handle, started, exc, live)
        finally:
            CURRENT.reset(token)
        outcome = self.outcomes.of_value(job, started, value, live)
        if live.after and outcome.state == JobState.SUCCEEDED:
            outcome.then = live.on_success()  # after_current=True: admitted with the success
        return outcome

    def crashed(
        self, job: Job, exc: BaseException | None, live: LiveState | None = None
    ) -> Outcome:
        """The outcome of a job whose executor thread died under it: a failed attempt.

        Retries follow the kind's policy when the kind is still known; this never raises, so
        the job cannot stay ``running`` because its outcome could not be made.
        """
        started = job.started_at or clock.now()
        cause = exc if exc is not None else RuntimeError("the executor thread ended")
        handle = get(job.kind)
        try:
            if handle is not None:
                live = live or LiveState(job)
                live.hooks = handle.hooks
                return self.outcomes.of_exception(job, handle, started, cause, live)
        except Exception:
            logger.exception("Classifying the crash of job %s failed", job.pk)
        return self.outcomes.refused(job, started, JobState.FAILED, describe_exception(cause))

    def _stopped_hard(self, ctx: JobContext, exc: JobTimeout) -> None:
        """A body stopped at its hard limit (in the timer thread): its attempt failed, and
        ``hard_stop`` records it now."""
        assert self.hard_stop is not None
        live = ctx.live
        self.hard_stop(ctx.job, live, self.crashed(ctx.job, exc, live))
