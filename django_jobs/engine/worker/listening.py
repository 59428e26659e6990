"""What a worker hears from the database: jobs due, cancels of its running jobs, paused queues.

Where the store ``supports_listen`` (PostgreSQL) one listener thread turns a notification into
an immediate wake-up of the claim loop (the poll stays as a fallback: a notification is a hint,
the claim is the truth), flags the cancels sent on this worker's own channel
(``Store.notify_cancel``, sent by the cancel's transaction) and reads the paused queues again on
a ``notify_paused``. Without it the keeper reads the cancels at the poll interval (at most every
second). Either way the keeper reads the paused queues twice a second too.
"""

from __future__ import annotations

import logging
import threading

from django.db import connections

from ..rows import fleet
from .ledger import Ledger
from .retrying import DatabaseRetry

logger = logging.getLogger("django_jobs.worker")


class Listener:
    """LISTEN/NOTIFY for one worker, and the reads that stand in for it."""

    def __init__(self, ledger: Ledger, retry: DatabaseRetry) -> None:
        self.ledger = ledger
        self.retry = retry
        self.go = threading.Event()

    def start(self) -> None:
        """The listener thread, where the store can listen, started with the worker's other
        threads (a thread that cannot start fails the worker's start, never a running worker);
        it connects and listens once ``begin`` is called, and ends once the worker stops."""
        if self.ledger.store.supports_listen:
            thread = threading.Thread(target=self._listen, name="jobs-listen", daemon=True)
            thread.start()

    def begin(self) -> None:
        """Connect and LISTEN now (the claim loop has what it wants: ``Claimer.run``)."""
        self.go.set()

    def _listen(self) -> None:
        ledger, store = self.ledger, self.ledger.store
        cancels = store.cancel_channel(ledger.worker_id)
        paused = store.paused_channel
        while not self.go.wait(0.5):
            if ledger.stopping.is_set():
                return
        try:
            while not ledger.stopping.is_set():
                try:
                    listener = store.listen_for_jobs(ledger.worker_id)
                    try:
                        # We may have missed notifications while (re)connecting.
                        ledger.wake.set()
                        self.cancels_heard(store.cancels_requested(ledger.worker_id))
                        self.read_paused()
                        while not ledger.stopping.is_set():
                            heard = listener.wait_notifications(0.5)
                            if any(c == paused and p == ledger.engine for c, p in heard):
                                self.read_paused()
                            if any(
                                c not in (cancels, paused) and p == ledger.engine for c, p in heard
                            ):
                                ledger.wake.set()
                            self.cancels_heard([int(p) for c, p in heard if c == cancels])
                    finally:
                        listener.close()
                except Exception:
                    logger.warning(
                        "LISTEN connection lost; polling until it is back.", exc_info=True
                    )
                    connections[ledger.alias].close()
                    ledger.stopping.wait(1.0)
        finally:
            connections.close_all()

    def cancels_heard(self, job_ids: list[int]) -> None:
        """Flag the cancels of these jobs, if this worker still holds them."""
        ledger = self.ledger
        with ledger.running_lock:
            for job_id in job_ids:
                entry = ledger.running.get(job_id)
                if entry is not None and not entry[1].cancel_requested:
                    entry[1].cancel_requested = True
                    logger.info("Job %s: cancel requested; its runner sees ctx.cancelled.", job_id)

    def read_paused(self) -> None:
        """Read which queues of this engine are paused; wake the claim loop when one resumed."""
        ledger = self.ledger
        paused = self.retry(lambda: fleet.paused_queues(ledger.engine, using=ledger.alias))
        if paused is None or paused == ledger.paused:
            return
        resumed = ledger.paused - paused
        ledger.paused = paused
        logger.info(
            "Paused queues of engine %s: %s.", ledger.engine, ", ".join(sorted(paused)) or "none"
        )
        if resumed:
            ledger.wake.set()

    def read_cancels(self) -> None:
        """Without LISTEN: read which of this worker's running jobs have a cancel requested."""
        ledger = self.ledger
        with ledger.running_lock:
            if not ledger.running:
                return
        flagged = self.retry(lambda: ledger.store.cancels_requested(ledger.worker_id))
        self.cancels_heard(flagged or [])
