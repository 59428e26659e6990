"""The states of jobs and steps: the one place their names are spelled.

Code elsewhere names a state by its constant (``JobState.QUEUED``), never by the bare string;
SQL text interpolates the constant's value. tests/unit/test_states.py keeps it so.
"""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    BLOCKED = "blocked"
    UNKNOWN = "unknown"
    CANCELLED = "cancelled"


class WorkerState(models.TextChoices):
    """What a worker row's ``state`` column holds. ``lost`` (``WORKER_LOST``) is never stored:
    a row whose heartbeat is older than the lease reads as lost
    (``django_jobs.engine.rows.fleet``)."""

    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


#: How a worker row whose heartbeat is older than the lease reads.
WORKER_LOST = "lost"


class StepState(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"


#: States in which a job holds its idempotency key.
LIVE_STATES: tuple[str, ...] = (
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.WAITING,
    JobState.BLOCKED,
    JobState.UNKNOWN,
)
#: States a job never leaves on its own.
ENDED_STATES: tuple[str, ...] = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
#: States a worker may claim (a waiting job is re-asked once its ``run_at`` is due).
CLAIMABLE_STATES: tuple[str, ...] = (JobState.QUEUED, JobState.WAITING)
#: States an operator may retry.
RETRYABLE_STATES: tuple[str, ...] = (JobState.FAILED, JobState.BLOCKED, JobState.CANCELLED)

#: The error of a job that ended ``cancelled`` because its ``expires_at`` passed before it
#: started (``expires=``).
EXPIRED_ERROR = "expired"
