"""``celery.exceptions``' names, with Celery's meaning, over the engine's own signals.

``SoftTimeLimitExceeded`` is a ``JobTimeout``: the engine raises it inside a task's body at its
``soft_time_limit``, and ``except SoftTimeLimitExceeded`` catches it there. ``Retry`` is a
``RetryLater``: ``raise self.retry(...)`` asks the engine for the next attempt. ``Ignore`` and
``Reject`` end a task as Celery's worker would (docs/migrating-from-celery.md says how each
shows on the job).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..exceptions import JobTimeout, RetryLater


class CeleryError(Exception):
    """The base of this module's errors, as ``celery.exceptions.CeleryError``."""


class TaskPredicate(CeleryError):
    """A signal from a task to its worker, not an error of the task."""


class SoftTimeLimitExceeded(JobTimeout):
    """Raised inside the body at its ``soft_time_limit``: clean up, then return or re-raise."""

    code = "JOB_TIMEOUT"

    def __init__(self, message: str = "soft time limit exceeded") -> None:
        super().__init__(message)


class TimeLimitExceeded(CeleryError):
    """The task was stopped at its hard ``time_limit`` (``AsyncResult.get()`` raises it)."""


class MaxRetriesExceededError(CeleryError):
    """``self.retry()`` was called with the retries spent and no ``exc=`` to raise instead."""

    def __init__(
        self, *args: Any, task_args: Any = None, task_kwargs: Any = None, **kwargs: Any
    ) -> None:
        self.task_args = task_args
        self.task_kwargs = task_kwargs
        super().__init__(*args, **kwargs)


class Retry(TaskPredicate, RetryLater):
    """``raise self.retry(...)``: run this task again after ``when`` (seconds or a datetime).

    It is also the engine's ``RetryLater``, so the next attempt is the engine's, as any other
    kind's: counted on the job, at the time given, its ``exc`` kept as the attempt's error.
    """

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | str | None = None,
        when: float | datetime | None = None,
        **kwargs: Any,
    ) -> None:
        self.message = message
        self.exc = None if isinstance(exc, str) else exc
        self.excs = exc if isinstance(exc, str) else (repr(exc) if exc is not None else None)
        self.when = when
        at = when if isinstance(when, datetime) else None
        after = float(when) if isinstance(when, int | float) else None
        RetryLater.__init__(self, str(self), after=after, at=at)

    def humanize(self) -> str:
        return f"at {self.when}" if isinstance(self.when, datetime) else f"in {self.when}s"

    def __str__(self) -> str:
        if self.message:
            return self.message
        if self.excs:
            return f"Retry {self.humanize()}: {self.excs}"
        return f"Retry {self.humanize()}"


RetryTaskError = Retry


class Ignore(TaskPredicate):
    """Raised by a task to end its job without a result: it is recorded ``cancelled``
    ("ignored"), never retried (Celery records no state for it)."""


class Reject(TaskPredicate):
    """Raised by a task to reject its message: ``requeue=True`` runs it again (an attempt
    counted, as a redelivery is); otherwise the job fails at once, a dead letter."""

    def __init__(self, reason: Any = None, requeue: bool = False) -> None:
        self.reason = reason
        self.requeue = requeue
        super().__init__(reason, requeue)

    def __str__(self) -> str:
        return f"reject requeue={self.requeue}: {self.reason}"


class WorkerLostError(CeleryError):
    """The worker process running the task was lost (billiard's ``WorkerLostError``)."""


class ChordError(CeleryError):
    """A member of a chord (or a chain's link) failed, so its body never ran."""


class TaskRevokedError(CeleryError):
    """``AsyncResult.get()`` of a task that was revoked (its job cancelled)."""


class TimeoutError(CeleryError):  # noqa: A001 - Celery's own name
    """``AsyncResult.get(timeout=)`` ran out before the task was ready."""


class TaskError(CeleryError):
    """A task's failure whose exception type cannot be rebuilt where ``get()`` is called: its
    ``args`` are the type's dotted name and the message."""


class NotRegistered(KeyError, CeleryError):
    """No task of that name is registered."""


__all__ = [
    "CeleryError",
    "ChordError",
    "Ignore",
    "MaxRetriesExceededError",
    "NotRegistered",
    "Reject",
    "Retry",
    "RetryTaskError",
    "SoftTimeLimitExceeded",
    "TaskError",
    "TaskPredicate",
    "TaskRevokedError",
    "TimeLimitExceeded",
    "TimeoutError",
    "WorkerLostError",
]
