"""Group commit of step rows: the executor threads of a worker that store a step at about the
same time store their rows in one statement and one commit, and each goes on once its row is
durable.

Why it exists: SPEC §3 has each step's result committed before the next step starts, so a
job of three plain steps is three commits on top of a no-op job's share of a claim and a
record. At concurrency 50 the executor threads each made that commit alone, on their own
connection: up to 50 statements at once, each with its round trip, its plan and its client
work, where one would do. The CPU, not the disk, was the limit (the same drain with
``synchronous_commit=off`` was no faster); one statement for many rows cut the worker's CPU
per three-step job by about half. docs/performance.md ("Durable steps: group commit") has
the measurements that decided it.

How: no thread of its own. A thread with a row to store becomes a *leader* when fewer than
``LEADERS`` writes are under way: it writes its row and every row queued so far, on its own
connection, in autocommit. Otherwise it queues its row and waits. A leader whose write ends
hands the rows queued meanwhile to the first of their threads, which leads the next write,
then wakes the threads whose rows it wrote. So a lone thread writes its own row at once (no
hand-off), and under load each write carries what queued during the one before.

Why four leaders: with ``LEADERS`` writes in flight at most, up to that many threads never
wait for one another, and PostgreSQL flushes concurrent commits together anyway. With one
write at a time the threads split into two groups that take turns (those answered by a
write queue during the next one), each waiting about two commits per step; measured at
concurrency 4 (a commit's latency, not the CPU, bounds it there), two leaders drained at
about 0.6 of the rate of four, and four as fast as a thread per write; at concurrency 50
two and four were alike. A worker of ``LEADERS`` threads or fewer has no group at all.

The guarantee is unchanged: ``insert`` returns only after the commit that holds the row has
returned (``synchronous_commit`` as configured: on by default, so flushed), and the calling
thread runs its next step only then. A kill -9 can lose only rows whose threads were still
waiting: their step bodies ran and their results were not stored, the same at-least-once
window as one commit per step. The rows of one write are one transaction: an error in it
(a lost connection, a step name another run stored) stores none, and then each row is
written again alone, so that each thread gets its own answer.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.db import connections

from ...store import get_store

if TYPE_CHECKING:
    from ...store.base import StepRow

logger = logging.getLogger("django_jobs.worker")

#: Writes under way at once at most (see the module's docstring).
LEADERS = 4
#: Rows written per statement at most: a bound on one statement's arrays, far above what a
#: worker's threads (one row each at most) ever queue.
WRITE_BATCH = 500


class _Pending:
    """One thread's row. ``done`` is held until the row is answered, or its thread is made
    the leader of ``lead``."""

    __slots__ = ("answered", "done", "error", "lead", "row", "step_id")

    def __init__(self, row: StepRow) -> None:
        self.row = row
        self.step_id: int | None = None
        self.error: Exception | None = None
        self.answered = False
        self.lead: list[_Pending] | None = None
        self.done = threading.Lock()
        self.done.acquire()

    def answer(self, *, step_id: int | None = None, error: Exception | None = None) -> None:
        self.step_id, self.error, self.answered = step_id, error, True


class StepWriter:
    """The group commit of a worker's step rows for one database alias (see the module)."""

    def __init__(self, alias: str, *, leaders: int = LEADERS) -> None:
        self.alias = alias
        self.leaders = leaders
        self._lock = threading.Lock()
        self._queued: list[_Pending] = []
        self._writing = 0
        #: Writes committed and the rows they held (read by tests and measurements).
        self.commits = 0
        self.rows = 0

    @property
    def writing(self) -> int:
        """Writes under way."""
        return self._writing

    @property
    def queued(self) -> int:
        """Rows waiting for the next write."""
        return len(self._queued)

    def insert(self, row: StepRow) -> int | None:
        """Store ``row`` on this thread's connection (which must be in autocommit) or another
        thread's; return its id once committed, or None when its run no longer holds its job
        (nothing written). Raises what writing it alone would raise."""
        mine = _Pending(row)
        with self._lock:
            if self._writing < self.leaders:
                self._writing += 1
                batch: list[_Pending] | None = [*self._queued, mine]
                self._queued = []
            else:
                self._queued.append(mine)
                batch = None
        if batch is None:
            mine.done.acquire()
            batch = mine.lead
        if batch is not None:
            self._lead(batch, mine)
        if mine.error is not None:
            raise mine.error
        return mine.step_id

    def _lead(self, batch: list[_Pending], mine: _Pending) -> None:
        """Write ``batch`` (which holds ``mine``), hand the rows queued meanwhile to the
        first of their threads, and wake the other threads of ``batch``, answered."""
        try:
            for start in range(0, len(batch), WRITE_BATCH):
                self._write(batch[start : start + WRITE_BATCH])
        except BaseException as exc:  # not a database error (those are answers): no thread
            failed = RuntimeError(f"Storing the step failed in another thread: {exc!r}")
            for pending in batch:  # may wait for good on an unanswered row
                if not pending.answered:
                    pending.answer(error=failed)
            raise
        finally:
            with self._lock:
                following, self._queued = self._queued, []
                if not following:
                    self._writing -= 1
            if following:
                following[0].lead = following
                following[0].done.release()
            for pending in batch:
                if pending is not mine:
                    pending.done.release()

    def _write(self, batch: list[_Pending]) -> None:
        try:
            ids = get_store(self.alias).insert_steps([p.row for p in batch])
        except Exception as exc:
            self._reset_connection()
            if len(batch) == 1:
                batch[0].answer(error=exc)
                return
            # One bad row (a name another run stored meanwhile) or a lost connection must
            # fail only the steps it concerns: each row again, alone, with its own answer.
            logger.warning(
                "Writing %s step rows in one statement failed (%s); writing each alone.",
                len(batch),
                exc,
            )
            for pending in batch:
                self._write_alone(pending)
            return
        self.commits += 1
        self.rows += len(batch)
        for pending, step_id in zip(batch, ids, strict=True):
            pending.answer(step_id=step_id)

    def _write_alone(self, pending: _Pending) -> None:
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
        if connection.connection is not None and not connection.is_usable():
            connection.close()
