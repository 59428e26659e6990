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


class AttemptOutcome(models.TextChoices):
    """How one run of a job ended, as its entry in ``Job.attempt_history`` says (SPEC §18;
    docs/api.md lists them for people). Some share a state's name: the run ended so."""

    SUCCEEDED = "succeeded"  # the runner returned: the job succeeded
    RETRYING = "retrying"  # it raised; the job is queued for another attempt
    FAILED = "failed"  # it raised, or could not end otherwise; the job failed (no retry)
    TIMED_OUT = "timed_out"  # stopped at its time limit (the job's state says what came next)
    LOST = "lost"  # its worker process died, or its worker's lease ran out
    CANCELLED = "cancelled"  # cancelled while it ran, or before its runner started
    WAITING = "waiting"  # it suspended (a wait, a sleep, ctx.requeue): the attempt goes on
    BLOCKED = "blocked"  # this worker could not run it (unknown kind, version, payload)
    UNKNOWN = "unknown"  # Uncertain: nobody knows whether its effect happened
    REQUEUED = "requeued"  # ended for no fault of its own; queued again, attempt not used


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
