"""Small shared value types: job and step states."""

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


class StepState(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"


#: States in which a job holds its idempotency key.
LIVE_STATES: tuple[str, ...] = ("queued", "running", "waiting", "blocked", "unknown")
#: States a job never leaves on its own.
ENDED_STATES: tuple[str, ...] = ("succeeded", "failed", "cancelled")
#: States a worker may claim (a waiting job is re-asked once its ``run_at`` is due).
CLAIMABLE_STATES: tuple[str, ...] = ("queued", "waiting")
#: States an operator may retry.
RETRYABLE_STATES: tuple[str, ...] = ("failed", "blocked", "cancelled")
