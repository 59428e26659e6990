"""Expiry: the queued jobs whose ``expires_at`` passed unstarted, ended where operators see it."""

from __future__ import annotations

import logging

from ... import clock
from .cadence import Duty, Retry
from .duties import end_expired_jobs

logger = logging.getLogger("django_jobs.worker")


class Expiry(Duty):
    """End the queued jobs whose ``expires_at`` passed unstarted (the claim passes over them;
    this makes their end seen), with the rescue's cadence."""

    def __init__(self, retry: Retry, *, every: float, first: float) -> None:
        super().__init__(every=every, first=first)
        self.retry = retry

    def run_once(self) -> None:
        try:
            ended = self.retry(lambda: end_expired_jobs(clock.now())) or []
        except Exception:  # expiry must never stop the worker
            logger.exception("Ending expired jobs failed; retrying at the next rescue.")
            return
        if ended:
            logger.info("Ended %s job(s) that expired before they started.", len(ended))
