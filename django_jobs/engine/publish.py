"""Publishing job events: never blocks or fails a job."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.db import transaction

from .. import clock
from ..signals import job_event
from ..states import JobState

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobs.events")

STATE_EVENTS: dict[str, str] = {
    JobState.RUNNING: "job.started",
    JobState.WAITING: "job.waiting",
    JobState.SUCCEEDED: "job.succeeded",
    JobState.FAILED: "job.failed",
    JobState.BLOCKED: "job.blocked",
    JobState.UNKNOWN: "job.blocked",
    JobState.CANCELLED: "job.cancelled",
    JobState.QUEUED: "job.retrying",
}


def publish(event_type: str, job: Job, **extra: Any) -> None:
    """Send ``job_event`` now; a failing receiver is logged, never raised."""
    if not job_event.receivers:
        return
    for receiver, response in job_event.send_robust(
        sender=type(job), type=event_type, job=job, at=clock.now(), **extra
    ):
        if isinstance(response, Exception):
            logger.error(
                "A job_event receiver %r failed on %s for job %s",
                receiver,
                event_type,
                job.pk,
                exc_info=response,
            )


def publish_after_commit(event_type: str, job: Job, *, alias: str, **extra: Any) -> None:
    if job_event.receivers:
        transaction.on_commit(lambda: publish(event_type, job, **extra), using=alias)


def publish_all_after_commit(event_type: str, jobs: list[Job], *, alias: str) -> None:
    """``publish`` each of ``jobs`` after the commit (one callback for a whole batch), with
    ``stored=True`` for a job whose event row was already written (``_created_event``)."""
    if job_event.receivers:

        def publish_all() -> None:
            for job in jobs:
                stored = job.__dict__.pop("_created_event", None) is not None
                publish(event_type, job, stored=stored)

        transaction.on_commit(publish_all, using=alias)
