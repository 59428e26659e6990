"""Retention on a worker: ``JOBS["RETENTION"]`` applied, and the fleet's old rows deleted."""

from __future__ import annotations

import logging

from ... import clock
from .cadence import Duty, Retry
from .duties import prune_expired, prune_workers

logger = logging.getLogger("django_jobs.worker")

PRUNE_EVERY = 60.0  # seconds


class Retention(Duty):
    """Apply JOBS["RETENTION"], and delete the rows of workers stopped a day ago (workers
    that run the scheduler do it, once a minute)."""

    def __init__(self, retry: Retry, *, alias: str) -> None:
        super().__init__(every=PRUNE_EVERY, first=PRUNE_EVERY)
        self.retry = retry
        self.alias = alias

    def run_once(self) -> None:
        try:
            self.retry(lambda: prune_expired(clock.now()))
            self.retry(lambda: prune_workers(clock.now(), using=self.alias))
        except Exception:  # retention must never stop the worker
            logger.exception("Pruning expired jobs failed; retrying in a minute.")
