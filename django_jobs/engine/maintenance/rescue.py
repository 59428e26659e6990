"""Rescue: the jobs of workers that stopped heartbeating, asked again once their lease ran out."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ... import clock
from ...store import Store
from .cadence import Duty, Retry
from .duties import rescue_stale

logger = logging.getLogger("django_jobs.worker")


class Rescue(Duty):
    """Re-ask the jobs of ``engine`` whose worker died; wake the claim loop for them."""

    def __init__(
        self,
        retry: Retry,
        store: Store,
        *,
        engine: str,
        wake: Callable[[], None],
        every: float,
        first: float,
    ) -> None:
        super().__init__(every=every, first=first)
        self.retry = retry
        self.store = store
        self.engine = engine
        self.wake = wake

    def run_once(self) -> None:
        rescued = self.retry(lambda: rescue_stale(self.store, engine=self.engine, now=clock.now()))
        if rescued:
            logger.warning("Re-asked %s job(s) whose worker stopped: %s", len(rescued), rescued)
            self.wake()
