"""Errors of the engine (``JobsError`` subclasses) and the control-flow signals runners raise.

Every error carries a stable ``code`` and a message that says what to do next.
"""

from __future__ import annotations

from datetime import datetime, timedelta


class JobsError(Exception):
    """Base class of every django_jobs error."""

    code: str = "JOBS_ERROR"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.code)
        self.message = message or (self.__class__.__doc__ or self.code).strip()

    def as_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class IdempotencyRequired(JobsError, TypeError):
    """@job needs idempotency_key: a callable(payload) -> str, or "payload"."""

    code = "IDEMPOTENCY_REQUIRED"


class JobDuplicate(JobsError):
    """A kind registered twice, or a live job already holds this idempotency key."""

    code = "JOB_DUPLICATE"

    def __init__(self, message: str = "", *, job: object | None = None) -> None:
        super().__init__(message)
        self.job = job


class StepDuplicate(JobsError):
    """Two steps share one name in a single run; step names are the replay key."""

    code = "STEP_DUPLICATE"


class StepNested(JobsError):
    """A step was called inside another step's activity; steps run one at a time."""

    code = "STEP_NESTED"


class JobTimeout(JobsError, TimeoutError):
    """A job or a wait_for_event passed its timeout."""

    code = "JOB_TIMEOUT"


class WorkerLost(JobsError):
    """The worker process running the job died (killed, out of memory, a crash in a C
    library); its supervisor ended the attempt at once, and the retry policy applies."""

    code = "WORKER_LOST"


class MaxAttempts(JobsError):
    """Retries are spent."""

    code = "MAX_ATTEMPTS"


class OutboxNoTransaction(JobsError):
    """enqueue() outside transaction.atomic() while JOBS["OUTBOX"] is "required"."""

    code = "OUTBOX_NO_TX"


class UnknownKind(JobsError, LookupError):
    """No job is registered under this kind."""

    code = "UNKNOWN_KIND"


class InvalidPayload(JobsError, ValueError):
    """The payload fails the kind's serializer or is not JSON."""

    code = "INVALID_PAYLOAD"

    def __init__(self, message: str = "", *, errors: object | None = None) -> None:
        super().__init__(message)
        self.errors = errors


class PayloadTooLarge(InvalidPayload):
    """The payload, as stored JSON, is over ``JOBS["MAX_PAYLOAD_BYTES"]``."""

    code = "PAYLOAD_TOO_LARGE"

    def __init__(self, message: str = "", *, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size, self.limit = size, limit


class InvalidResult(JobsError, ValueError):
    """A runner or a step returned a value that cannot be stored as JSON."""

    code = "INVALID_RESULT"


class InvalidDuration(JobsError, ValueError):
    """A duration is not "30s", "5m", "2h", "3d", "250ms", a timedelta or a number of seconds."""

    code = "INVALID_DURATION"


class InvalidSchedule(JobsError, ValueError):
    """A bad cron expression, or a bad or missing time zone."""

    code = "INVALID_SCHEDULE"

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        super().__init__(message)
        #: The schedule field at fault ("cron", "tz", "name", ...), when one is.
        self.field = field


class ScheduleNotAllowed(JobsError, PermissionError):
    """A user may not schedule this kind (or it does not exist), or not for this owner."""

    code = "SCHEDULE_NOT_ALLOWED"


class Cancelled(JobsError):
    """Cancellation of this job was requested."""

    code = "CANCELLED"


class NotRetryable(JobsError):
    """retry() of a job in a state that cannot be retried."""

    code = "NOT_RETRYABLE"


class UnknownStep(NotRetryable):
    """retry(from_step=...) names a step the job does not have."""

    def __init__(
        self, message: str = "", *, step: str = "", steps: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.step, self.steps = step, list(steps or [])


class RetryNotAllowed(JobsError, PermissionError):
    """retry() by a user who may not retry this job, or not from a step."""

    code = "RETRY_NOT_ALLOWED"


class JobNotFound(JobsError, LookupError):
    """No job has this id."""

    code = "JOB_NOT_FOUND"


class UnknownEngine(JobsError, LookupError):
    """No engine of ``JOBS["ENGINES"]`` has this name."""

    code = "UNKNOWN_ENGINE"


class NotCancellable(JobsError):
    """cancel() of a job that has already ended."""

    code = "NOT_CANCELLABLE"


class ChildFailed(JobsError):
    """``ctx.step.gather`` found children that failed or were cancelled (``.failed``: their ids).

    The parent fails at once, without using its retries, unless its runner catches this.
    """

    code = "CHILD_FAILED"

    def __init__(self, message: str = "", *, failed: list[int] | None = None) -> None:
        super().__init__(message)
        self.failed = list(failed or [])


# --- control flow ---------------------------------------------------------------------------


class ControlFlow(Exception):
    """Raised by a runner or a step to steer the job; not an error of the engine."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RetryLater(ControlFlow):
    """Retry this job later (bounded by its attempts), after ``after`` or at ``at``."""

    def __init__(
        self,
        reason: str,
        after: str | float | timedelta | None = None,
        at: datetime | None = None,
    ) -> None:
        super().__init__(reason)
        self.after = after
        self.at = at


class Blocked(ControlFlow):
    """Stop the job until an operator retries it."""


class Unrecoverable(ControlFlow):
    """Fail the job now, without retries."""


class Uncertain(ControlFlow):
    """The effect may or may not have happened: stop as ``unknown`` for reconciliation."""
