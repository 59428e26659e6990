"""The supervisor's worker row (``engine.rows.fleet``): written at its start, beaten at the
lease's cadence with its children's counts, marked as it stops.

The row is for the operators (the workers view): a write that fails is logged, the row is
written again at a later beat, and it never stops the supervisor or its shutdown.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, close_old_connections, connections

from ..rows import fleet

logger = logging.getLogger("django_jobs.worker")


class FleetRow:
    """The row of the supervisor ``name``: one per ``runjobs --processes N``."""

    def __init__(
        self,
        name: str,
        *,
        engine: str,
        queues: list[str] | None,
        processes: int,
        concurrency: int,
        alias: str,
    ) -> None:
        self.name = name
        self.engine = engine
        self.queues = queues
        self.processes = processes
        self.concurrency = concurrency
        self.alias = alias

    def register(self) -> None:
        try:
            fleet.register(
                self.name,
                engine=self.engine,
                queues=self.queues,
                processes=self.processes,
                concurrency=self.concurrency,
                using=self.alias,
            )
        except DatabaseError:
            logger.exception("Could not write worker %s's row; trying at the next beat.", self.name)

    def beat(
        self,
        running: int,
        done: int,
        *,
        stopping: bool,
        processes: list[dict[str, Any]] | None = None,
    ) -> None:
        """The counts of the jobs running and done, and the worker processes
        (``processes_detail``); the row written again if it is gone (and the supervisor is not
        stopping)."""
        try:
            close_old_connections()
            written = fleet.beat(
                self.name,
                jobs_running=running,
                jobs_done=done,
                processes_detail=processes,
                using=self.alias,
            )
        except DatabaseError as exc:
            logger.error("Could not beat worker %s's row (%s).", self.name, exc)
            connections[self.alias].close()
            return
        if written == 0 and not stopping:
            self.register()

    def mark(self, state: str, running: int, done: int) -> None:
        try:
            fleet.mark(self.name, state, jobs_running=running, jobs_done=done, using=self.alias)
        except Exception:  # the row is for the operators: it must never stop a shutdown
            logger.exception("Could not mark worker %s %s.", self.name, state)
