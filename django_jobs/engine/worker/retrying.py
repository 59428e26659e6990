"""The worker's store calls when the database is away: log, reconnect, try again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connections

logger = logging.getLogger("django_jobs.worker")

T = TypeVar("T")

#: SQLSTATEs of a prepared statement that is already there or missing: a server connection
#: shared by clients that each prepare (PgBouncer's transaction mode before 1.21).
_PREPARED_STATEMENT_STATES = ("42P05", "26000")


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
                    "Database unavailable (%s); retrying in %.1fs. %s", exc, delay, _hint(exc)
                )
                connections[self.alias].close()
                if self.stopping.is_set() and not forever:
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


def _hint(exc: DatabaseError) -> str:
    """What to check: reconnecting does not cure a pooler that mixes prepared statements."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate in _PREPARED_STATEMENT_STATES:
        return (
            "The server connection is shared with other clients (PgBouncer in transaction "
            "mode?): set DISABLE_SERVER_SIDE_CURSORS = True on the database, or use session "
            "mode or PgBouncer 1.21+ with max_prepared_statements > 0 (docs/scaling.md)."
        )
    return "Check that it is up and takes writes (disk space, read-only mode)."
