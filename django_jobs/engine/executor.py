"""Run one claimed job as named stages and turn what happened into an ``Outcome``.

resolve the runner -> check version and payload -> run (sync or async, with its timeout)
-> classify the return value or exception. Nothing here writes the outcome: the caller does,
in batches (the worker) or at once (``run_until_idle``).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import clock
from ..exceptions import (
    Blocked,
    Cancelled,
    InvalidPayload,
    InvalidResult,
    JobTimeout,
    MaxAttempts,
    RetryLater,
    Uncertain,
    Unrecoverable,
)
from ..registry import JobHandle, ensure_json, get
from ..store import Outcome
from ..validation import printable
from .context import JobContext, LiveState, Requeue
from .steps import Suspend

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobs.executor")

ERROR_CAP = 2000


def cap_error(text: str) -> str:
    """Keep an error within ERROR_CAP characters: its head and the end of its traceback.

    NUL and lone surrogates (an exception's message may carry any text) become visible
    escapes, so the error can be stored and read."""
    text = printable(text)
    if len(text) <= ERROR_CAP:
        return text
    marker = "\n[…]\n"
    head = 1000
    return text[:head] + marker + text[-(ERROR_CAP - head - len(marker)) :]


def describe_exception(exc: BaseException) -> str:
    """The exception's class and message (shortened), then the frames of its traceback."""
    message = str(exc)
    if len(message) > 500:
        message = message[:500] + "…"
    frames = "".join(traceback.format_tb(exc.__traceback__))
    return f"{type(exc).__name__}: {message}\n\nTraceback (most recent call last):\n{frames}"


class Executor:
    """Runs jobs for one worker (or for ``run_until_idle``)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def run(self, job: Job, live: LiveState | None = None) -> Outcome:
        live = live or LiveState(job)
        started = clock.now()
        handle = get(job.kind)
        if handle is None:
            return self._stop(
                job,
                started,
                "blocked",
                f"Kind {job.kind!r} is not registered in this deployment. Deploy code that "
                "defines it, then retry the job; or cancel it.",
            )
        if (job.version or "") != (handle.version or ""):
            return self._stop(
                job,
                started,
                "blocked",
                f"The job was admitted for version {job.version!r} of {job.kind!r}; the code is "
                f"version {handle.version!r}. Migrate or cancel the job, or retry it to run it "
                "with the current code.",
            )
        try:
            payload = handle.validate_payload(job.payload)
        except InvalidPayload as exc:
            return self._stop(
                job,
                started,
                "blocked",
                f"The stored payload no longer validates: {exc.message} Fix it or cancel the job.",
            )
        if handle.timeout is not None:
            live.deadline = started + handle.timeout
        ctx = JobContext(job, payload, live)
        try:
            value = self._call(handle, ctx)
            if ctx.timed_out and handle.timeout is not None:
                raise JobTimeout(
                    f"Job #{job.pk} ran past its timeout of {handle.timeout}; make it faster, "
                    "raise timeout= on @job, or check ctx.cancelled in long loops."
                )
        except BaseException as exc:  # every failure becomes an outcome
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            return self._from_exception(job, handle, started, exc, live)
        return self._from_value(job, started, value, live)

    def _call(self, handle: JobHandle, ctx: JobContext) -> Any:
        if not handle.is_async:
            return handle.func(ctx)
        timeout = handle.timeout.total_seconds() if handle.timeout else None

        async def main() -> Any:
            try:
                return await asyncio.wait_for(handle.func(ctx), timeout)
            except TimeoutError as exc:
                raise JobTimeout(
                    f"Job #{ctx.job.pk} ran past its timeout of {handle.timeout}; make it "
                    "faster or raise timeout= on @job."
                ) from exc

        return asyncio.run(main())

    # -- classification -----------------------------------------------------------------------

    def _base(self, job: Job, started: datetime, state: str, live: LiveState) -> Outcome:
        taken = live.take()
        if taken:
            live.final = (taken[2], taken[3])
        return Outcome(
            job_id=job.pk,
            worker_id=self.worker_id,
            state=state,
            started_at=started,
            ended_at=clock.now(),
            progress=taken[0] if taken else None,
            log=taken[1] if taken else None,
        )

    def _from_value(self, job: Job, started: datetime, value: Any, live: LiveState) -> Outcome:
        if isinstance(value, Requeue):
            outcome = self._base(job, started, "waiting", live)
            outcome.wait_reason, outcome.run_at = printable(value.reason), value.run_at
            return outcome
        try:
            if value is not None:  # None, the common result, is JSON: skip the dump
                ensure_json(value, what="result")
        except InvalidPayload as exc:
            error = InvalidResult(
                f"{job.kind!r} returned a value that cannot be stored: {exc.message}"
            )
            outcome = self._base(job, started, "failed", live)
            outcome.error = cap_error(f"{error.code}: {error.message}")
            return outcome
        outcome = self._base(job, started, "succeeded", live)
        outcome.result = value
        return outcome

    def _from_exception(
        self, job: Job, handle: JobHandle, started: datetime, exc: BaseException, live: LiveState
    ) -> Outcome:
        if isinstance(exc, Suspend):
            outcome = self._base(job, started, "waiting", live)
            outcome.wait_reason, outcome.run_at = printable(exc.reason), exc.run_at
            return outcome
        if isinstance(exc, Cancelled):
            outcome = self._base(job, started, "cancelled", live)
            outcome.error = cap_error(f"{exc.code}: {exc.message}")
            return outcome
        if isinstance(exc, Blocked | Uncertain):
            state = "blocked" if isinstance(exc, Blocked) else "unknown"
            outcome = self._base(job, started, state, live)
            outcome.error = cap_error(f"{type(exc).__name__}: {exc.reason}")
            return outcome
        if isinstance(exc, Unrecoverable):
            outcome = self._base(job, started, "failed", live)
            outcome.error = cap_error(f"Unrecoverable: {exc.reason}")
            return outcome
        now = clock.now()
        if isinstance(exc, RetryLater):
            text = f"RetryLater: {exc.reason}"
            run_at = exc.at
            if run_at is None and exc.after is not None:
                from ..durations import parse_duration

                run_at = now + parse_duration(exc.after, name="RetryLater after")
        else:
            logger.info(
                "Job %s (%s) attempt %s failed", job.pk, job.kind, job.attempts, exc_info=exc
            )
            text = describe_exception(exc)
            run_at = None
        if job.attempts < job.max_attempts:
            outcome = self._base(job, started, "queued", live)
            # An operator retry grants a fresh set of attempts: count within the current set.
            nth = max(1, job.attempts - (job.max_attempts - handle.retry.attempts))
            outcome.run_at = run_at or now + timedelta(milliseconds=handle.retry.delay_ms(nth))
            outcome.error = cap_error(text)
            return outcome
        spent = MaxAttempts(
            f"Retries are spent after {job.attempts} attempt(s); the job is a dead letter. "
            "Fix the cause, then retry it (`manage.py jobs retry ID`)."
        )
        outcome = self._base(job, started, "failed", live)
        outcome.error = cap_error(f"{spent.code}: {spent.message}\nLast error: {text}")
        return outcome

    def _stop(self, job: Job, started: datetime, state: str, reason: str) -> Outcome:
        return Outcome(
            job_id=job.pk,
            worker_id=self.worker_id,
            state=state,
            started_at=started,
            ended_at=clock.now(),
            error=cap_error(reason),
        )
