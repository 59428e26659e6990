"""The worker's store calls when the database is away: log, reconnect, try again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connections

from django_jobs.store.hints import database_hint

logger = logging.getLogger("django_jobs.worker")

T = TypeVar("T")


class DatabaseRetry:
    """Runs a store call of one worker until the database answers.

    Once the worker is stopping a call is given up after its first failure (None), unless
    ``forever``: what must be written for the jobs to stay right (outcomes, hand-backs).
    """

    def __init__(self, alias: str, stopping: threading.Event) -> None:
        self.alias = alias
        self.stopping = stopping

    def __call__(self, fn: Callable[[], T], *, forever: bool = False) -> T | None:
        """Run a store call; if the database is away, log, reconnect and try again."""
        delay = 0.2
        while True:
            try:
                return fn()
            except DatabaseError as exc:
                logger.error(
                    "Database unavailable (%s); retrying in %.1fs. %s",
                    exc,
                    delay,
                    database_hint(exc),
                )
                connections[self.alias].close()
                if self.stopping.is_set() and not forever:
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
