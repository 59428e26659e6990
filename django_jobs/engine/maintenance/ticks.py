"""The scheduler's tick on a worker: due schedules fired, the next tick set by their timing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from ... import clock
from ...models import Job
from ..schedules.scheduler import tick_until
from .cadence import Duty, Retry

logger = logging.getLogger("django_jobs.worker")

#: Seconds between scheduler ticks at most, and at least (the keeper wakes every 0.1 s).
TICK_EVERY = 1.0
MIN_TICK = 0.05


class ScheduleTicker(Duty):
    """Fires the due occurrences of the schedules; wakes the claim loop for what it fired."""

    def __init__(self, retry: Retry, *, wake: Callable[[], None]) -> None:
        # The first tick of the keeper a second after it starts: the worker ticked at start.
        super().__init__(every=TICK_EVERY, first=TICK_EVERY)
        self.retry = retry
        self.wake = wake

    def run_once(self) -> float:
        """Fire the due occurrences; return the seconds until the next tick: at the next
        occurrence of the schedules (so a 20 s interval fires on time), at most 1 s (a
        schedule added meanwhile is seen within a second), at least the keeper's own beat."""
        try:
            ticked: tuple[list[Job], datetime | None] = self.retry(
                lambda: tick_until(clock.now())
            ) or ([], None)
            fired, next_at = ticked
        except Exception:  # a broken schedule must not stop the worker
            logger.exception("Scheduler tick failed; retrying at the next tick.")
            return TICK_EVERY
        if fired:
            logger.info(
                "Scheduler fired %s occurrence(s): %s",
                len(fired),
                ", ".join(job.idempotency_key or str(job.pk) for job in fired),
            )
            self.wake()
        if next_at is None:
            return TICK_EVERY
        until = (next_at - clock.now()).total_seconds()
        return min(TICK_EVERY, max(until, MIN_TICK))
