"""Run one claimed job as named stages and turn what happened into an ``Outcome``.

resolve the runner -> check version and payload -> run (sync or async, with its timeout)
-> classify the return value or exception. Nothing here writes the outcome: the caller does,
in batches (the worker) or at once (``run_until_idle``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync

from .. import clock
from ..durations import format_duration, parse_duration
from ..exceptions import (
    Blocked,
    Cancelled,
    ChildFailed,
    InvalidPayload,
    InvalidResult,
    JobDuplicate,
    JobTimeout,
    MaxAttempts,
    RetryLater,
    Uncertain,
    UnknownKind,
    Unrecoverable,
    WorkerLost,
)
from ..printable import printable
from ..registry import JobHandle, get
from ..serialize import TRACEBACK_MARKER
from ..states import JobState
from ..store import Outcome
from ..validation import storable_json as ensure_json
from ..validation import storable_text
from .context import JobContext, LiveState, Requeue
from .loops import run_async
from .running import CURRENT, Running
from .suspend import Suspend
from .tracing import install_log_filter, processing, resume

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobs.executor")

ERROR_CAP = 2000


def cap_error(text: str) -> str:
    """Keep an error within ERROR_CAP characters: its head and the end of its traceback.

    NUL and lone surrogates (an exception's message may carry any text) become visible
    escapes, so the error can be stored and read. The traceback is found in the raw text,
    before escaping (an escape is six characters: a message of NULs would otherwise push the
    traceback's first line into the cut), and the message and the traceback are escaped and
    shortened apart, keeping the line between them. So ``public_error``, the view a job's
    owner gets, never holds a line of the frames, whatever the message holds."""
    message, marker, frames = text.partition(TRACEBACK_MARKER)
    message = storable_text(message)
    if not marker:
        return _shorten(message, ERROR_CAP)
    frames = storable_text(frames)
    if len(message) + len(marker) + len(frames) <= ERROR_CAP:
        return message + marker + frames
    message = _shorten(message, ERROR_HEAD)
    room = ERROR_CAP - len(message) - len(marker)
    return message + marker + _CUT + frames[-(room - len(_CUT)) :]


ERROR_HEAD = 1000
_CUT = "\n[…]\n"


def _shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its head and its end, with a visible cut."""
    if len(text) <= limit:
        return text
    head = min(ERROR_HEAD, limit // 2)
    return text[:head] + _CUT + text[-(limit - head - len(_CUT)) :]


def hang_grace(timeout: timedelta) -> timedelta:
    """How long past its timeout a sync runner may go on before the worker gives up on it.

    A quarter of the timeout, between 1 second and 1 minute: time for a runner that checks
    ``ctx.cancelled`` to see it and stop by itself.
    """
    return min(max(timeout / 4, timedelta(seconds=1)), timedelta(minutes=1))


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not lose the outcome
        return f"<the {type(exc).__name__} could not be turned into text>"


def describe_exception(exc: BaseException, *, for_log: bool = False) -> str:
    """The exception's class and message (shortened), then the frames of its traceback.

    ``for_log``: control characters escaped (the message may carry a job's text), the
    traceback's own line breaks kept, for the worker's log.
    """
    message = _message(exc)
    if len(message) > 500:
        message = message[:500] + "…"
    if isinstance(exc, SystemExit):
        message += (
            " (the runner, or a library it called, called exit(): a runner fails by raising "
            "an exception; the worker goes on)"
        )
    frames = "".join(traceback.format_tb(exc.__traceback__))
    if for_log:
        message, frames = printable(message), printable(frames, keep_newlines=True)
    # A time limit, or a lost worker process, says so with its code, as the error's first
    # line: "JOB_TIMEOUT: ...", "WORKER_LOST: ...".
    name = exc.code if isinstance(exc, (JobTimeout, WorkerLost)) else type(exc).__name__
    return f"{name}: {message}{TRACEBACK_MARKER}\n{frames}"


def _first_line(text: str) -> str:
    return text.partition(TRACEBACK_MARKER)[0].split("\n", 1)[0]


def _spent(job: Job, exc: BaseException, text: str) -> str:
    """A dead letter's error: the ``MAX_ATTEMPTS`` line quotes the last error's first line; a
    job whose last attempt ran past its time limit says so first (``JOB_TIMEOUT: ...``)."""
    timed_out = isinstance(exc, JobTimeout)
    quoted = "" if timed_out else f" (last error: {_first_line(text)})"
    spent = MaxAttempts(
        f"Retries are spent after {job.attempts} attempt(s){quoted}; the job is a dead letter. "
        "Fix the cause, then retry it (`manage.py jobs retry ID`)."
    )
    head = f"{_first_line(text)}\n" if timed_out else ""
    return f"{head}{spent.code}: {spent.message}\nLast error: {text}"


def _not_retried(job: Job, handle: JobHandle, exc: BaseException, text: str) -> str:
    """The error of a failure whose type ``Retry(on=...)`` does not list: why it was final."""
    listed = ", ".join(kind.__name__ for kind in handle.retry.on)
    cause = _first_line(text)
    head = f"{cause}\n" if isinstance(exc, JobTimeout) else ""
    return (
        f"{head}NOT_RETRIED: {type(exc).__name__} is not retried: Retry(on=({listed})) of "
        f"{handle.kind!r} retries only those types, so attempt {job.attempts} failed the job "
        "at once. Fix the cause, then retry it (`manage.py jobs retry ID`), or add the type to "
        f"on=.\nLast error: {text}"
    )


class Executor:
    """Runs jobs for one worker (or, ``inline``, for ``run_until_idle`` and ``jobs drain``).

    ``inline``: an async runner's database calls run on the calling thread, on its own
    connection, so a test's transaction holds them too. Otherwise each executor thread keeps
    an event loop and a database thread of its own for its async jobs (``engine.loops``).
    """

    def __init__(self, worker_id: str, *, inline: bool = False) -> None:
        self.worker_id = worker_id
        self.inline = inline
        if not inline:
            install_log_filter()  # a worker's log records carry the running job's fields

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
            return self._cancelled(
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

    def _cancelled(self, job: Job, started: datetime, live: LiveState, message: str) -> Outcome:
        outcome = self._base(job, started, JobState.CANCELLED, live)
        outcome.error = cap_error(f"{Cancelled.code}: {message}")
        return outcome

    def _run(self, job: Job, live: LiveState, started: datetime) -> Outcome:
        handle = get(job.kind)
        if handle is None:
            return self._stop(
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
            return self._stop(
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
            return self._stop(
                job,
                started,
                JobState.BLOCKED,
                f"The stored payload no longer validates: {exc.message} Fix it or cancel the job.",
            )
        if handle.timeout is not None:
            live.deadline, live.timeout = started + handle.timeout, handle.timeout
        live.hooks = handle.hooks
        ctx = JobContext(job, payload, live)
        token = CURRENT.set(live)
        try:
            value = self._call(handle, ctx, live)
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
            return self._from_exception(job, handle, started, exc, live)
        finally:
            CURRENT.reset(token)
        outcome = self._from_value(job, started, value, live)
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
                return self._from_exception(job, handle, started, cause, live)
        except Exception:
            logger.exception("Classifying the crash of job %s failed", job.pk)
        return self._stop(job, started, JobState.FAILED, describe_exception(cause))

    def _call(self, handle: JobHandle, ctx: JobContext, running: Running) -> Any:
        if not handle.is_async:
            return handle.func(ctx)
        timeout = handle.timeout.total_seconds() if handle.timeout else None

        async def main() -> Any:
            CURRENT.set(running)  # the loop may run on another thread, in its own context
            resume(running)  # and so the attempt's span, when tracing
            try:
                async with asyncio.timeout(timeout) as limit:
                    value = await handle.func(ctx)
            except TimeoutError as exc:
                raise JobTimeout(
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
        return run_async(main)

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
            outcome = self._base(job, started, JobState.WAITING, live)
            outcome.wait_reason, outcome.run_at = storable_text(value.reason), value.run_at
            return outcome
        try:
            if value is not None:  # None, the common result, is JSON: skip the dump
                ensure_json(value, what="result")
        except InvalidPayload as exc:
            error = InvalidResult(
                f"{job.kind!r} returned a value that cannot be stored: {exc.message}"
            )
            outcome = self._base(job, started, JobState.FAILED, live)
            outcome.error = cap_error(f"{error.code}: {error.message}")
            live.exc = error
            return outcome
        outcome = self._base(job, started, JobState.SUCCEEDED, live)
        outcome.result = value
        return outcome

    def _from_exception(
        self, job: Job, handle: JobHandle, started: datetime, exc: BaseException, live: LiveState
    ) -> Outcome:
        live.exc = exc
        if isinstance(exc, Suspend):
            outcome = self._base(job, started, JobState.WAITING, live)
            outcome.wait_reason, outcome.run_at = storable_text(exc.reason), exc.run_at
            return outcome
        if isinstance(exc, Cancelled):
            outcome = self._base(job, started, JobState.CANCELLED, live)
            outcome.error = cap_error(f"{exc.code}: {exc.message}")
            return outcome
        if isinstance(exc, Blocked | Uncertain):
            state = JobState.BLOCKED if isinstance(exc, Blocked) else JobState.UNKNOWN
            outcome = self._base(job, started, state, live)
            outcome.error = cap_error(f"{type(exc).__name__}: {exc.reason}")
            return outcome
        if isinstance(exc, ChildFailed):
            # Retrying would gather the same failed children again: fail now, attempts kept
            # (``retry(id, children=True)`` retries those children and waits for them again).
            outcome = self._base(job, started, JobState.FAILED, live)
            outcome.error = cap_error(f"{exc.code}: {exc.message}")
            return outcome
        if isinstance(exc, Unrecoverable):
            outcome = self._base(job, started, JobState.FAILED, live)
            outcome.error = cap_error(f"Unrecoverable: {exc.reason}")
            return outcome
        now = clock.now()
        if isinstance(exc, RetryLater):
            text = f"RetryLater: {exc.reason}"
            run_at = exc.at
            if run_at is None and exc.after is not None:
                run_at = now + parse_duration(exc.after, name="RetryLater after")
        elif isinstance(exc, JobDuplicate) and getattr(exc.job, "pk", None) == job.pk:
            # The job enqueued itself with its own key: every attempt would do the same, so
            # none is spent on it (the mistake shows on the first run, as it would in a test).
            outcome = self._base(job, started, JobState.FAILED, live)
            outcome.error = cap_error(describe_exception(exc))
            return outcome
        else:
            # Not exc_info: the message is the runner's text, escaped before it reaches a log.
            logger.info(
                "Job %s (%s) attempt %s failed: %s",
                job.pk,
                printable(job.kind),
                job.attempts,
                describe_exception(exc, for_log=True),
            )
            text = describe_exception(exc)
            run_at = None
            # A lost process is not the runner's error: its attempts decide, whatever ``on=``.
            if not isinstance(exc, WorkerLost) and not handle.retry.retries(exc):
                outcome = self._base(job, started, JobState.FAILED, live)
                outcome.error = cap_error(_not_retried(job, handle, exc, text))
                return outcome
        decision = handle.retry.decide(job.attempts, now, limit=job.max_attempts)
        if decision.retry:
            outcome = self._base(job, started, JobState.QUEUED, live)
            outcome.run_at = run_at or decision.run_at
            outcome.error = cap_error(text)
            return outcome
        outcome = self._base(job, started, JobState.FAILED, live)
        outcome.error = cap_error(_spent(job, exc, text))
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
