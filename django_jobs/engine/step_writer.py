"""Group commit of step rows: one writer thread stores the new step rows of every executor
thread of a worker, many per statement and commit, and wakes each thread once its row is
durable.

Why it exists: SPEC §3 has each step's result committed before the next step starts, so a
job of three plain steps is three commits on top of a no-op job's share of a claim and a
record. At concurrency 50 the executor threads each made that commit alone, on their own
connection: up to 50 statements, plans and WAL flushes at once where one would do.
docs/performance.md ("Durable steps: group commit") has the measurement that decided it.

The guarantee is unchanged: ``insert`` returns only after the commit that holds the row has
returned (``synchronous_commit`` as configured: on by default, so flushed), and the calling
thread runs its next step only then. A kill -9 of the worker can lose only rows whose
threads were still waiting: their step bodies ran and their results were not stored, the
same at-least-once window as one commit per step.

What it does not do: wait to fill a batch. The writer takes whatever is pending when it
finishes a write (one row when one thread is writing), so a lone thread pays one hand-off
to the writer and back and nothing more.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING

from django.db import connections

from ..store import get_store

if TYPE_CHECKING:
    from ..store.base import StepRow

logger = logging.getLogger("django_jobs.worker")

#: Rows written per statement at most: a bound on one statement's arrays, far above what
#: a worker's threads (one pending row each) ever queue.
WRITE_BATCH = 500


class _Pending:
    """One thread's row, waiting for its commit. ``done`` is held until the write ends."""

    __slots__ = ("answered", "done", "error", "row", "step_id")

    def __init__(self, row: StepRow) -> None:
        self.row = row
        self.step_id: int | None = None
        self.error: BaseException | None = None
        self.answered = False
        self.done = threading.Lock()
        self.done.acquire()

    def answer(self, *, step_id: int | None = None, error: BaseException | None = None) -> None:
        self.step_id, self.error, self.answered = step_id, error, True


class StepWriter:
    """The worker's step writer for one database alias (see the module's docstring)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._pending: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        # Held while a row is queued and while the writer decides to end: a row queued
        # after the end would never be written (see ``insert``).
        self._open = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None
        #: Commits made and rows they held, since the start (for tests and measurements).
        self.commits = 0
        self.rows = 0

    def start(self) -> StepWriter:
        self._thread = threading.Thread(target=self._loop, name="jobs-steps", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Write what is queued, then end the thread. Later rows are written by their own
        threads (``insert`` falls back to the store)."""
        with self._open:
            if self._closed:
                return
            self._closed = True
            self._pending.put(None)
        if self._thread is not None:
            self._thread.join()

    def insert(self, row: StepRow) -> int | None:
        """Store ``row``; return its id once committed, or None when its run no longer holds
        its job (nothing written). Raises what writing it alone would raise."""
        pending = _Pending(row)
        with self._open:
            if self._closed:  # a thread left to a hung runner, after the worker stopped
                return get_store(self.alias).insert_steps([row])[0]
            self._pending.put(pending)
        pending.done.acquire()
        if pending.error is not None:
            raise pending.error
        return pending.step_id

    # -- the writer thread --------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            ending = False
            while not ending:
                first = self._pending.get()
                batch = [] if first is None else [first]
                ending = first is None
                while len(batch) < WRITE_BATCH:
                    try:
                        item = self._pending.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        ending = True
                    else:
                        batch.append(item)
                if batch:
                    self._write(batch)
        finally:
            connections.close_all()

    def _write(self, batch: list[_Pending]) -> None:
        try:
            self._store(batch)
        except BaseException as exc:  # never leave a thread waiting for good
            for pending in batch:
                if not pending.answered:
                    pending.error = exc
        finally:
            for pending in batch:
                pending.done.release()

    def _store(self, batch: list[_Pending]) -> None:
        try:
            ids = get_store(self.alias).insert_steps([p.row for p in batch])
        except Exception as exc:
            # One bad row (a name another run stored meanwhile) or a lost connection must
            # fail only the steps it concerns: each row again, alone, with its own answer.
            self._reset_connection()
            if len(batch) == 1:
                batch[0].answer(error=exc)
                return
            logger.warning(
                "Writing %s step rows in one statement failed (%s); writing each alone.",
                len(batch),
                exc,
            )
            for pending in batch:
                self._store_alone(pending)
            return
        self.commits += 1
        self.rows += len(batch)
        for pending, step_id in zip(batch, ids, strict=True):
            pending.answer(step_id=step_id)

    def _store_alone(self, pending: _Pending) -> None:
        try:
            [step_id] = get_store(self.alias).insert_steps([pending.row])
        except Exception as exc:
            self._reset_connection()
            pending.answer(error=exc)
            return
        self.commits += 1
        self.rows += 1
        pending.answer(step_id=step_id)

    def _reset_connection(self) -> None:
        connection = connections[self.alias]
        if connection.in_atomic_block:
            return
        if connection.connection is not None and not connection.is_usable():
            connection.close()
