"""What one attempt of a job came to, as an ``Outcome``, and the error text stored with it.

``Outcomes`` makes the ``Outcome`` of an attempt from what its runner returned
(``of_value``), from what it raised (``of_exception``: retried, failed, a dead letter,
blocked, cancelled, waiting), or from why it never ran (``refused``, ``cancelled``).
``describe_exception`` and ``cap_error`` write the error as it is stored: its first line
says what happened, the frames of its traceback follow, within ``ERROR_CAP`` characters.
"""

from __future__ import annotations

import logging
import os
import traceback
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ... import clock
from ...durations import parse_duration
from ...exceptions import (
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
    Unrecoverable,
    WorkerLost,
)
from ...printable import printable
from ...serialize import TRACEBACK_MARKER
from ...states import AttemptOutcome, JobState
from ...store import Outcome
from ...validation import storable_json as ensure_json
from ...validation import storable_text
from ..durable.suspend import Suspend
from .context import LiveState, Requeue

if TYPE_CHECKING:
    from ...kinds.handle import JobHandle
    from ...models import Job

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
    if not frames:
        # Never raised (a lost process, a limit that ended the attempt from outside): no
        # frames to show, so no empty traceback under the line.
        return f"{name}: {message}"
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
    cause = _first_line(text)
    head = f"{cause}\n" if isinstance(exc, JobTimeout) else ""
    why = handle.retry.not_retried(handle.kind, job.attempts, exc)
    return f"{head}NOT_RETRIED: {type(exc).__name__} is not retried: {why}\nLast error: {text}"


class Outcomes:
    """The outcomes of the attempts one worker runs: each says which worker it ran in."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def base(self, job: Job, started: datetime, state: str, live: LiveState) -> Outcome:
        """An outcome in ``state``, with the progress and log the runner left to write."""
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
            attempt=job.attempts,
            pid=os.getpid(),
        )

    def refused(self, job: Job, started: datetime, state: str, reason: str) -> Outcome:
        """The attempt stopped before its runner was called (or could not be classified)."""
        return Outcome(
            job_id=job.pk,
            worker_id=self.worker_id,
            state=state,
            started_at=started,
            ended_at=clock.now(),
            error=cap_error(reason),
            attempt=job.attempts,
            pid=os.getpid(),
        )

    def cancelled(self, job: Job, started: datetime, live: LiveState, message: str) -> Outcome:
        outcome = self.base(job, started, JobState.CANCELLED, live)
        outcome.error = cap_error(f"{Cancelled.code}: {message}")
        return outcome

    def of_value(self, job: Job, started: datetime, value: Any, live: LiveState) -> Outcome:
        """What the runner returned: a result to store, or ``ctx.requeue(...)``'s wait."""
        if isinstance(value, Requeue):
            outcome = self.base(job, started, JobState.WAITING, live)
            outcome.wait_reason, outcome.run_at = storable_text(value.reason), value.run_at
            return outcome
        try:
            if value is not None:  # None, the common result, is JSON: skip the dump
                ensure_json(value, what="result")
        except InvalidPayload as exc:
            error = InvalidResult(
                f"{job.kind!r} returned a value that cannot be stored: {exc.message}"
            )
            outcome = self.base(job, started, JobState.FAILED, live)
            outcome.error = cap_error(f"{error.code}: {error.message}")
            live.exc = error
            return outcome
        outcome = self.base(job, started, JobState.SUCCEEDED, live)
        outcome.result = value
        return outcome

    def of_exception(
        self, job: Job, handle: JobHandle, started: datetime, exc: BaseException, live: LiveState
    ) -> Outcome:
        """What the runner raised: a wait, a stop, or a failure the kind's retries judge. A
        lost process's attempt and one stopped at its time limit say so in the job's history
        (``lost``, ``timed_out``), whatever comes next."""
        outcome = self._of_exception(job, handle, started, exc, live)
        if isinstance(exc, WorkerLost):
            outcome.label = AttemptOutcome.LOST
        elif isinstance(exc, JobTimeout) and outcome.state in (JobState.QUEUED, JobState.FAILED):
            outcome.label = AttemptOutcome.TIMED_OUT
        return outcome

    def _of_exception(
        self, job: Job, handle: JobHandle, started: datetime, exc: BaseException, live: LiveState
    ) -> Outcome:
        live.exc = exc
        if isinstance(exc, Suspend):
            outcome = self.base(job, started, JobState.WAITING, live)
            outcome.wait_reason, outcome.run_at = storable_text(exc.reason), exc.run_at
            return outcome
        if isinstance(exc, Cancelled):
            outcome = self.base(job, started, JobState.CANCELLED, live)
            outcome.error = cap_error(f"{exc.code}: {exc.message}")
            return outcome
        if isinstance(exc, Blocked | Uncertain):
            state = JobState.BLOCKED if isinstance(exc, Blocked) else JobState.UNKNOWN
            outcome = self.base(job, started, state, live)
            outcome.error = cap_error(f"{type(exc).__name__}: {exc.reason}")
            return outcome
        if isinstance(exc, ChildFailed):
            # Retrying would gather the same failed children again: fail now, attempts kept
            # (``retry(id, children=True)`` retries those children and waits for them again).
            outcome = self.base(job, started, JobState.FAILED, live)
            outcome.error = cap_error(f"{exc.code}: {exc.message}")
            return outcome
        if isinstance(exc, Unrecoverable):
            outcome = self.base(job, started, JobState.FAILED, live)
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
            outcome = self.base(job, started, JobState.FAILED, live)
            outcome.error = cap_error(describe_exception(exc))
            return outcome
        else:
            # Not exc_info: the message is the runner's text, escaped before it reaches a log.
            # An error the kind expects (a Celery task's ``throws``) is logged without its
            # traceback; the job's stored error keeps it.
            logged = describe_exception(exc, for_log=True)
            if handle.expected_errors and isinstance(exc, handle.expected_errors):
                logged = logged.split(TRACEBACK_MARKER, 1)[0]
            logger.info(
                "Job %s (%s) attempt %s failed: %s",
                job.pk,
                printable(job.kind),
                job.attempts,
                logged,
            )
            text = describe_exception(exc)
            run_at = None
            # A lost process is not the runner's error: its attempts decide, whatever ``on=``.
            if not isinstance(exc, WorkerLost) and not handle.retry.retries(exc):
                outcome = self.base(job, started, JobState.FAILED, live)
                outcome.error = cap_error(_not_retried(job, handle, exc, text))
                return outcome
        decision = handle.retry.decide(job.attempts, now, limit=job.max_attempts)
        if decision.retry:
            outcome = self.base(job, started, JobState.QUEUED, live)
            if isinstance(exc, WorkerLost):
                # An attempt lost to the infrastructure keeps the job's place: it runs again
                # as soon as it would have, ahead of a backlog queued after it.
                run_at = job.run_at
            outcome.run_at = run_at or decision.run_at
            outcome.error = cap_error(text)
            return outcome
        outcome = self.base(job, started, JobState.FAILED, live)
        outcome.error = cap_error(_spent(job, exc, text))
        return outcome
