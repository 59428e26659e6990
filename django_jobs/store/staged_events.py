"""``job.created`` stored by the commit of the caller's transaction (PostgreSQL).

An enqueue inside the caller's ``transaction.atomic()`` cannot take the events' write lock
(``store/events.py``) when it inserts: the lock would be held until the caller commits, and
every other writer of events would wait behind it. Storing the rows after the commit, in a
transaction of their own, costs a second commit (the enqueue ran at a third of autocommit's
rate). So the insert writes each job's ``job.created`` row to a staging table, in the
caller's transaction, and a deferred constraint trigger on that table moves the rows into
the events table when the transaction commits: it takes the write lock there, draws the ids,
sends the NOTIFY, and the commit follows at once. One commit; the lock is held only for the
commit itself, as an autocommit insert of events holds it; ids still follow commit order, so
``Last-Event-ID`` replay stays exact. A rollback takes the staged rows with it.

The staging table is ``UNLOGGED``: its rows live only inside one transaction (inserted by it,
deleted by its commit), so there is nothing to recover after a crash, and they cost no WAL.
Each row fires the trigger once; the first firing of a transaction moves every row it staged
so far (found by the index on the transaction's id: the table's pages hold earlier
transactions' dead rows until autovacuum comes, and a scan of them grew with every commit),
the others find their row gone (one lookup of the primary key) and return. Rows are moved in
job id order, as an autocommit insert stores them.

An insert in the caller's transaction is one statement of it, with no savepoint (see
``engine/rows/admission.py``), and stages only once the table exists (``StagingTable``: a deploy
may start the new code before ``migrate``). On SQLite the rows are stored just after the
caller's commit (``engine/rows/publish.py``, ``publish_created``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from django.db import connections

from .event_rows import TABLE, LazyRows, StoredEvent

#: The staging table, its trigger and the trigger's function (made by migration 0012, whose
#: text is kept as it was applied).
STAGED_TABLE = "django_jobs_stagedevent"
TRIGGER = "django_jobs_stagedevent_store"

#: Fires the triggers of the rows staged so far now, inside the transaction (a test's
#: ``on_commit`` callbacks run while its transaction is still open).
SETTLE = f"SET CONSTRAINTS {TRIGGER} IMMEDIATE"


class StagingTable:
    """Whether a database has the staging table (its migration may not have run yet: a
    deploy that starts the new code before ``migrate``). Until it has, job.created of an
    enqueue inside the caller's transaction follows the commit, as before; the answer is
    kept once yes, and asked again at most every ``RECHECK`` seconds while no."""

    RECHECK = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: set[str] = set()
        self._asked: dict[str, float] = {}

    def ready(self, alias: str) -> bool:
        if alias in self._ready:
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._asked.get(alias, -self.RECHECK) < self.RECHECK:
                return False
            self._asked[alias] = now
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [STAGED_TABLE])
            if cursor.fetchone()[0]:
                self._ready.add(alias)
                return True
        return False

    def forget(self) -> None:
        """Ask again (tests that drop or make the table)."""
        with self._lock:
            self._ready.clear()
            self._asked.clear()


staging_table = StagingTable()


class StagedRows(LazyRows):
    """The ``job.created`` rows of jobs inserted inside the caller's transaction, as its
    commit stored them: read from the events table when first looked at, after the commit
    (the fleet publisher reads them; without a transport through Redis nobody does, and the
    read is never made). ``after_id`` is the events' newest id when the rows were staged:
    the ids the commit drew are above it (the id sequence hands out values in order, as
    Django makes it, with a cache of one), so the read is a short range of the primary key."""

    def __init__(self, alias: str, job_ids: list[int], after_id: int) -> None:
        self.alias = alias
        self.job_ids = job_ids
        self.after_id = after_id
        self._rows: list[StoredEvent] | None = None

    def settle(self) -> None:
        """Store the staged rows now if their transaction is still open (a test's
        ``on_commit`` callbacks, run inside its transaction); after a commit, nothing."""
        connection = connections[self.alias]
        if self.job_ids and connection.in_atomic_block:
            with connection.cursor() as cursor:
                cursor.execute(SETTLE)

    @property
    def rows(self) -> list[StoredEvent]:
        if self._rows is None:
            self._rows = _read(self.alias, self.job_ids, self.after_id) if self.job_ids else []
        return self._rows

    def __repr__(self) -> str:
        return f"<StagedRows of jobs {self.job_ids} after event {self.after_id}>"


def _read(alias: str, job_ids: list[int], after_id: int) -> list[StoredEvent]:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"SELECT id, type, job_id, owner, data FROM {TABLE} "
            "WHERE id > %s AND type = %s AND job_id = ANY(%s) ORDER BY id",
            [after_id, "job.created", job_ids],
        )
        return [StoredEvent(*row) for row in cursor.fetchall()]


def settle(written: Sequence[StoredEvent]) -> None:
    """``StagedRows.settle`` for each staged part of ``written`` (rows stored already: nothing)."""
    for part in getattr(written, "parts", [written]):
        if isinstance(part, StagedRows):
            part.settle()
