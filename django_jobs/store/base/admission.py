"""Admission: a batch of new jobs inserted, the holder of a live idempotency key returned (as
deduped) in place of a new row, and the jobs' ``job.created`` rows written with them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...models import Job
from ...states import LIVE_STATES
from ..event_rows import Inserted, MakeRow, StoredEvent, chained
from .columns import SELECT_COLUMNS, TABLE
from .core import StoreCore
from .new_job import NewJob


class AdmissionMixin(StoreCore):
    """Inserting new jobs; each dialect writes the rows themselves (``_insert_rows``)."""

    # True when ``insert`` writes in one statement (its reads of deduped rows aside), so in
    # autocommit it needs no transaction of its own.
    insert_is_one_statement = False
    # True when ``_insert_rows`` returns the inserted jobs in the order of their rows.
    inserts_in_row_order = False

    def stages_created_events(self) -> bool:
        """True when, inside the caller's transaction, ``_insert_rows`` writes the
        job.created rows for the commit to store (``staged_events.py``); otherwise they
        follow the commit."""
        return False

    def insert(self, rows: list[NewJob]) -> list[tuple[Job, bool]]:
        """Insert ``rows``; a row whose live key exists returns that job with ``deduped``.

        Inserting wakes the idle workers of the new rows' engines once the transaction commits
        (``_insert_rows`` sends it; a store without wake-ups sends nothing).
        """
        return self.insert_with_events(rows)[0]

    def insert_with_events(
        self, rows: list[NewJob], created: MakeRow | None = None
    ) -> tuple[list[tuple[Job, bool]], Sequence[StoredEvent]]:
        """``insert``, and with ``created`` the ``job.created`` row of each job inserted
        (``created(job)`` makes it, from the job as inserted, id included): written by the
        same statement on PostgreSQL, in the same transaction on SQLite. Returns the results
        and the event rows stored (none for a deduped row). Called in autocommit, the event
        rows take the events' write lock (``store/events.py``) until the statement ends;
        inside the caller's transaction, PostgreSQL stages them for its commit to store
        (``store/staged_events.py``), and they are read when first looked at."""
        parts: list[Sequence[StoredEvent]] = []
        return self._insert(rows, created, parts), chained(parts)

    def _insert(
        self, rows: list[NewJob], created: MakeRow | None, stored: list[Sequence[StoredEvent]]
    ) -> list[tuple[Job, bool]]:
        jobs: list[Job] = []
        if rows:
            jobs, events = self._insert_rows(rows, created)
            stored.append(events)
        if self.inserts_in_row_order and len(jobs) == len(rows):
            return [(job, False) for job in jobs]  # every row inserted: nothing to match
        inserted = {self._identity(j): j for j in jobs}
        results: list[tuple[Job, bool]] = []
        seen: set[tuple[Any, ...]] = set()
        missing = [r for r in rows if (r.kind, r.owner_id or 0, r.idempotency_key) not in inserted]
        existing = {self._identity(j): j for j in self._live_with_keys(missing)}
        for row in rows:
            identity = (row.kind, row.owner_id or 0, row.idempotency_key)
            if identity in inserted and identity not in seen:
                seen.add(identity)
                results.append((inserted[identity], False))
            elif identity in inserted:
                results.append((inserted[identity], True))
            elif identity in existing:
                results.append((existing[identity], True))
            else:
                # The live holder ended between our insert and our read: insert again.
                results.extend(self._insert([row], created, stored))
        return results

    @staticmethod
    def _identity(job: Job) -> tuple[Any, ...]:
        return (job.kind, job.owner_id or 0, job.idempotency_key)

    def _insert_rows(self, rows: list[NewJob], created: MakeRow | None) -> Inserted:
        """Insert the rows (skipping those whose key a live job holds); return the jobs
        inserted and, with ``created``, their job.created rows as stored."""
        raise NotImplementedError

    def _live_with_keys(self, rows: list[NewJob]) -> list[Job]:
        if not rows:
            return []
        keys = sorted({r.idempotency_key for r in rows})
        key_sql, key_params = self.in_list(keys)
        state_sql, state_params = self.in_list(list(LIVE_STATES))
        wanted = {(r.kind, r.owner_id or 0, r.idempotency_key) for r in rows}
        jobs = self.jobs_from(
            f"SELECT {SELECT_COLUMNS} FROM {TABLE} WHERE idempotency_key {key_sql} "
            f"AND state {state_sql}",
            [*key_params, *state_params],
        )
        return [j for j in jobs if self._identity(j) in wanted]
