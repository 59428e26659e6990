"""The recorder of a worker: outcomes written in batches, live output flushed, events stored.

On the keeper thread. The executor threads put each ``Outcome`` on the worker's outcomes queue;
the keeper takes up to ``RECORD_BATCH`` of them at a time and the recorder writes them in one
statement, then publishes their events and calls their hooks. Live progress and log lines are
flushed every 0.2 s; the live events of this process are stored in one statement per round
(``EventWriter.keep_by``).
"""

from __future__ import annotations

import functools
import queue
from typing import Any

from ...kinds.hooks import call_hooks
from ...store import Outcome
from ..rows.publish import publish, writer
from ..run.runner import publish_recorded
from .ledger import RECORD_BATCH, Ledger
from .retrying import DatabaseRetry

#: Put on the keeper's queue when events wait for it to store them (``EventWriter.keep_by``).
_EVENTS: Any = object()


class Recorder:
    """Writes what the jobs of one worker did, from the keeper thread."""

    def __init__(self, ledger: Ledger, retry: DatabaseRetry) -> None:
        self.ledger = ledger
        self.retry = retry
        # True while an _EVENTS is on the keeper's queue (one is enough).
        self.events_woken = False

    def take(self) -> tuple[list[Outcome], bool]:
        """The next batch of outcomes (waiting up to 0.1 s for the first), and whether the
        worker is done (the None put on the queue as it stops)."""
        outcomes = self.ledger.outcomes
        batch: list[Outcome] = []
        done = False
        try:
            first = outcomes.get(timeout=0.1)
            if first is None:
                done = True
            else:
                if first is not _EVENTS:
                    batch.append(first)
                while len(batch) < RECORD_BATCH:
                    item = outcomes.get_nowait()
                    if item is None:
                        done = True
                        break
                    if item is not _EVENTS:
                        batch.append(item)
        except queue.Empty:
            pass
        return batch, done

    def store_events(self) -> None:
        # Before taking them: an event published meanwhile puts _EVENTS again.
        self.events_woken = False
        writer.store_pending()

    def wake_for_events(self) -> None:
        if not self.events_woken:
            self.events_woken = True
            self.ledger.outcomes.put(_EVENTS)

    def record(self, batch: list[Outcome]) -> None:
        ledger = self.ledger
        written = self.retry(lambda: ledger.store.record(batch), forever=True) or []
        with ledger.running_lock:
            entries = [ledger.running.pop(o.job_id, (None, None)) for o in batch]
            ledger.in_flight -= len(batch)
        ledger.processed += len(batch)
        if ledger.parent is not None:
            ledger.parent.recorded(
                [
                    o.job_id
                    for o, (_, live) in zip(batch, entries, strict=True)
                    if live is not None and live.announced
                ]
            )
        ledger.wake.set()
        written_ids = set(written)
        for outcome, (job, live) in zip(batch, entries, strict=True):
            if job is None or live is None or outcome.job_id not in written_ids:
                continue
            publish_recorded(job, outcome, live)
            if live.hooks is not None:
                call_hooks(live.hooks, job, outcome, live.exc)

    def flush_live(self) -> None:
        ledger = self.ledger
        with ledger.running_lock:
            running = list(ledger.running.values())
        for job, live in running:
            taken = live.take()
            if taken is None:
                continue
            progress, log, new_lines, progress_changed = taken
            self.retry(
                functools.partial(ledger.store.save_live, job.pk, ledger.worker_id, progress, log)
            )
            job.progress, job.log = progress, log
            for line in new_lines:
                publish("job.log", job, line=line)
            if progress_changed:
                publish("job.progress", job)
