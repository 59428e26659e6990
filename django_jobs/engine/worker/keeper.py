"""The keeper thread of a worker: outcomes recorded in batches, then its duties in turn.

One thread, one connection. Each round takes a batch of outcomes (waiting up to 0.1 s for the
first) and records it, stores the live events, then runs the duties that are due, in this
order, with one reading of the clock:

    live output flushed, and jobs claimed ahead handed back   every 0.2 s
    heartbeat: leases, the worker's row, the supervisor      a third of the lease
    cancels read (without LISTEN)                            the poll interval, at most 1 s
    paused queues read                                       twice as often
    expired jobs ended, then dead workers' jobs rescued      half the lease
    the charts' finished minutes closed                      every 10 s, one worker a minute
    the scheduler's tick (scheduler, not burst)              as the schedules fall due, <= 1 s
    retention (scheduler, not burst)                         once a minute
"""

from __future__ import annotations

import threading
import time

from django.db import connections

from ..maintenance.cadence import Duty, Every
from ..maintenance.expiry import Expiry
from ..maintenance.rescue import Rescue
from ..maintenance.retention import Retention
from ..maintenance.rollups import Rollups
from ..maintenance.ticks import ScheduleTicker
from ..rows.publish import writer
from .claiming import Claimer
from .heartbeat import Heartbeat
from .ledger import Ledger
from .listening import Listener
from .recording import Recorder
from .retrying import DatabaseRetry


class Keeper:
    """Owns the keeper thread: the recorder's batches, then the duties that are due."""

    def __init__(
        self,
        ledger: Ledger,
        retry: DatabaseRetry,
        *,
        recorder: Recorder,
        claimer: Claimer,
        heartbeat: Heartbeat,
        listener: Listener,
    ) -> None:
        self.ledger = ledger
        self.recorder = recorder
        self.claimer = claimer
        lease = ledger.lease.total_seconds()
        rescue_every = max(lease / 2, 0.5)
        # A worker process under a supervisor rescues on its keeper's first turn, just after
        # it is ready: a restart's slot is not held up by maintenance.
        first_rescue = rescue_every if ledger.parent is None else 0.0
        self.expiry = Expiry(retry, every=rescue_every, first=first_rescue)
        self.rescue = Rescue(
            retry,
            ledger.store,
            engine=ledger.engine,
            wake=ledger.wake_claims,
            every=rescue_every,
            first=first_rescue,
        )
        self.ticker = ScheduleTicker(retry, wake=ledger.wake_claims)
        self.retention = Retention(retry, alias=ledger.alias)
        # Without LISTEN, cancels are read at the poll interval (at most every second).
        cancels_every = min(ledger.poll, 1.0)
        self.duties: list[Duty] = [
            Every(self._flush, every=0.2),
            Every(heartbeat.beat, every=max(lease / 3, 0.2)),
        ]
        if not ledger.store.supports_listen:
            self.duties.append(Every(listener.read_cancels, every=cancels_every))
        # The paused queues, twice as often, with LISTEN or without: a pause stops the claims
        # within a second, whatever the keeper's wake-ups (every 0.1 s) add to the poll. A
        # NOTIFY makes it sooner; a pause row written without one (by SQL, a restore, a replica
        # promoted) is seen all the same. One small read of an indexed table.
        paused_every = cancels_every / 2
        self.duties.append(Every(listener.read_paused, every=paused_every, first=paused_every))
        self.duties += [self.expiry, self.rescue]
        # Every worker, burst ones too (a fleet of cron-started drains still gets its charts).
        self.duties.append(Rollups(retry, engine=ledger.engine, alias=ledger.alias))
        if ledger.scheduler and not ledger.burst:
            self.duties += [self.ticker, self.retention]
        self.thread: threading.Thread | None = None

    def rescue_now(self) -> None:
        """At start, outside the keeper thread (a worker without a supervisor)."""
        self.expiry.run_once()
        self.rescue.run_once()

    def start(self) -> None:
        # The keeper stores this process's live events from now on (one statement per batch
        # of outcomes, not a thread of their own): see ``EventWriter.keep_by``.
        writer.keep_by(self.recorder.wake_for_events)
        self.thread = threading.Thread(target=self._keep, name="jobs-keeper", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """After the executor threads: what they recorded last is written, then the thread
        ends."""
        self.ledger.outcomes.put(None)  # type: ignore[arg-type]
        if self.thread is not None:
            self.thread.join()

    def _flush(self) -> None:
        self.recorder.flush_live()
        self.claimer.release_hostages()

    def _keep(self) -> None:
        recorder, duties = self.recorder, self.duties
        now = time.monotonic()
        for duty in duties:
            duty.start(now)
        done = False
        try:
            while not done:
                batch, done = recorder.take()
                if batch:
                    recorder.record(batch)
                recorder.store_events()
                now = time.monotonic()
                for duty in duties:
                    if now >= duty.next_at:
                        duty.run(now)
        finally:
            writer.store_pending()  # the last events; what fails goes to the writer thread
            writer.kept_no_more(self.recorder.wake_for_events)
            connections.close_all()
