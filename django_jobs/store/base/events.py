"""Event rows the store writes (``store.events.insert``, and the jobs' ``job.created`` rows
where a dialect does not write them with the jobs): in one statement where the store
``inserts_events_in_one_statement``, else in a transaction of their own, as a savepoint inside
the caller's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from ..event_rows import COLUMNS, SQLITE_CHUNK, TABLE, NewEvent, StoredEvent, stored
from .core import StoreCore


class EventRowsMixin(StoreCore):
    """Inserting event rows; a dialect may write a batch its own way (``_insert_event_rows``)."""

    def insert_events(
        self, events: Sequence[NewEvent], *, ordered: bool = True
    ) -> list[StoredEvent]:
        """Store ``events`` atomically (in a savepoint inside the caller's transaction) and
        NOTIFY; return them stored, with their ids, in the order given: what
        ``store.events.insert`` runs (see there for ``ordered``)."""
        if not events:
            return []
        if self.inserts_events_in_one_statement and not self.connection.in_atomic_block:
            ids = self._insert_event_rows(events, ordered)
        else:
            with transaction.atomic(using=self.alias):
                ids = self._insert_event_rows(events, ordered)
        return stored(events, ids)

    def _insert_event_rows(self, events: Sequence[NewEvent], ordered: bool) -> list[int]:
        """Insert ``events`` in their order and return their ids: a multi-row ``VALUES`` per
        chunk, the database serializing its writers (``ordered`` asks nothing more of it)."""
        connection = self.connection
        adapt = connection.ops.adapt_datetimefield_value
        ids: list[int] = []
        with connection.cursor() as cursor:
            for start in range(0, len(events), SQLITE_CHUNK):
                chunk = events[start : start + SQLITE_CHUNK]
                params: list[Any] = []
                for e in chunk:
                    params += [e.type, e.job_id, e.owner, e.data, adapt(e.created_at)]
                values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
                cursor.execute(
                    f"INSERT INTO {TABLE} ({COLUMNS}) VALUES {values} RETURNING id", params
                )
                ids += [row[0] for row in cursor.fetchall()]
        return ids
