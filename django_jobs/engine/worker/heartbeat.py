"""A worker's heartbeat: the leases of its jobs renewed, its row in the fleet, its supervisor told.

On the keeper thread, every third of the lease. The heartbeat also brings the cancel flags of the
jobs it renews, as a fallback to the listener. The worker's row (``engine.rows.fleet``) is
written at start, updated on each beat (written again if it was pruned) and marked
``stopping`` and ``stopped`` as the worker ends.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ... import clock
from ..rows import fleet
from .child import resident_memory
from .ledger import Ledger
from .listening import Listener
from .retrying import DatabaseRetry

logger = logging.getLogger("django_jobs.worker")


class Heartbeat:
    """The worker's pulse, seen by the store, the fleet's rows and the supervisor."""

    def __init__(self, ledger: Ledger, retry: DatabaseRetry, listener: Listener) -> None:
        self.ledger = ledger
        self.retry = retry
        self.listener = listener

    def beat(self) -> None:
        ledger = self.ledger
        flags = (
            self.retry(lambda: ledger.store.heartbeat(ledger.worker_id, clock.now() + ledger.lease))
            or {}
        )
        self.listener.cancels_heard([job_id for job_id, cancel in flags.items() if cancel])
        if ledger.fleet_row:
            self.beat_row()
        if ledger.parent is not None:
            ledger.parent.beat(ledger.jobs_running(), ledger.processed, resident_memory())
            if ledger.parent.orphaned and not ledger.stopping.is_set():
                logger.warning("Worker %s: its supervisor is gone; finishing.", ledger.worker_id)
                ledger.stop()

    def register_row(self) -> None:
        """Write this worker's row (``engine.fleet``): at start, and again after a heartbeat
        found it gone (pruned, or deleted by hand)."""
        ledger = self.ledger
        self.retry(
            lambda: fleet.register(
                ledger.name,
                engine=ledger.engine,
                queues=ledger.queues,
                concurrency=ledger.concurrency,
                processes_detail=self.processes_detail(),
                using=ledger.alias,
            )
        )

    def processes_detail(self) -> list[dict[str, Any]]:
        """A worker that runs its jobs itself (``--processes 0``): its own process, the one
        entry of its row's ``processes_detail``."""
        ledger = self.ledger
        return [
            fleet.process_entry(
                slot=0,
                pid=os.getpid(),
                generation=0,
                started_at=ledger.started_at,
                rss_bytes=resident_memory(),
                jobs_done=ledger.processed,
                restarts=0,
                jobs=[job.pk for job in list(ledger.held) if job is not None],
            )
        ]

    def beat_row(self) -> None:
        """The worker's row: one UPDATE per heartbeat (written again if it was pruned)."""
        ledger = self.ledger
        written = self.retry(
            lambda: fleet.beat(
                ledger.name,
                jobs_running=ledger.jobs_running(),
                jobs_done=ledger.processed,
                processes_detail=self.processes_detail(),
                using=ledger.alias,
            )
        )
        if written == 0 and not ledger.stopping.is_set():
            self.register_row()

    def mark(self, state: str) -> None:
        ledger = self.ledger
        if not ledger.fleet_row:
            return
        try:
            self.retry(
                lambda: fleet.mark(
                    ledger.name,
                    state,
                    jobs_running=ledger.jobs_running(),
                    jobs_done=ledger.processed,
                    using=ledger.alias,
                )
            )
        except Exception:  # the row is for the operators: it must never stop a shutdown
            logger.exception("Could not mark worker %s %s.", ledger.name, state)
