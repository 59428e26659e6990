"""Every statement on the event rows (``JobEventRecord``): insert, read after an id, prune.

Ids are the order of events. On PostgreSQL an insert batch takes a transaction-level advisory
lock, so batches commit in id order: a reader that has seen id N never sees a smaller id
commit later, and "everything after my last id" is a complete answer. SQLite serializes
writers anyway. The NOTIFY (PostgreSQL) is delivered on commit and wakes the relays.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.models import Q

from ..models import Job, JobEventRecord
from . import get_store
from .event_rows import (
    COLUMNS,
    NOTIFY_CHANNEL,
    SQLITE_CHUNK,
    TABLE,
    WRITE_LOCK,
    NewEvent,
    StoredEvent,
)


def insert(alias: str, events: Sequence[NewEvent], *, ordered: bool = True) -> list[StoredEvent]:
    """Store ``events`` atomically (in a savepoint inside the caller's transaction) and NOTIFY;
    return them stored, with their ids, in the order given (which is the order of the ids).

    One statement for the batch on PostgreSQL (``unnest``; write lock and NOTIFY included, so
    in autocommit it is one round trip), a multi-row ``VALUES`` per chunk on SQLite.
    ``ordered`` takes the write lock on PostgreSQL (see the module docstring); inside a longer
    transaction of the caller pass ``ordered=False``, or the lock is held until it ends.
    """
    if not events:
        return []
    one_statement = get_store(alias).inserts_events_in_one_statement
    if one_statement and not connections[alias].in_atomic_block:
        ids = _insert_postgresql(alias, events, ordered)
    else:
        with transaction.atomic(using=alias):
            if one_statement:
                ids = _insert_postgresql(alias, events, ordered)
            else:
                ids = _insert_sqlite(alias, events)
    return stored(events, ids)


def stored(events: Sequence[NewEvent], ids: list[int]) -> list[StoredEvent]:
    """The events as stored: the ids a statement drew for them, which follow their order (the
    rows are inserted in that order; only the ids come back, the rest was sent)."""
    return [
        StoredEvent(event_id, e.type, e.job_id, e.owner, e.data)
        for event_id, e in zip(sorted(ids), events, strict=True)
    ]


def _postgresql_sql(ordered: bool) -> str:
    # The lock is taken before the first id is drawn: the INSERT reads the "locked" row
    # before it emits any row. The rows go in in the order sent (ORDER BY the ordinal), so
    # their ids follow it. The NOTIFY is delivered on commit, and sent only if a row was
    # inserted. Parameters: the lock key (ordered), the arrays, the channel.
    lock = "locked AS (SELECT pg_advisory_xact_lock(%s)), " if ordered else ""
    after_lock = ", (SELECT COUNT(*) FROM locked) AS l" if ordered else ""
    # Binary arrays (%b): the client does not quote every value of the batch.
    return (
        f"WITH {lock}ins AS (INSERT INTO {TABLE} ({COLUMNS}) "
        "SELECT u.type, u.job_id, u.owner, u.data, u.created_at FROM unnest("
        "%b::varchar[], %b::bigint[], %b::varchar[], %b::text[], %b::timestamptz[]) "
        f"WITH ORDINALITY AS u(type, job_id, owner, data, created_at, n){after_lock} "
        "ORDER BY u.n RETURNING id), "
        "told AS (SELECT pg_notify(%s, '') FROM (SELECT 1 FROM ins LIMIT 1) AS one) "
        "SELECT ins.id FROM ins, (SELECT COUNT(*) AS n FROM told) AS w"
    )


_POSTGRESQL_SQL = {ordered: _postgresql_sql(ordered) for ordered in (False, True)}


def _insert_postgresql(alias: str, events: Sequence[NewEvent], ordered: bool) -> list[int]:
    params: list[Any] = [WRITE_LOCK] if ordered else []
    params += [
        [e.type for e in events],
        [e.job_id for e in events],
        [e.owner for e in events],
        [e.data for e in events],
        [e.created_at for e in events],
        NOTIFY_CHANNEL,
    ]
    # Server-side binding: the statement gets prepared (see PostgresStore.prepared_cursor).
    with get_store(alias).prepared_cursor() as cursor:
        cursor.execute(_POSTGRESQL_SQL[ordered], params)
        return [row[0] for row in cursor.fetchall()]


def _insert_sqlite(alias: str, events: Sequence[NewEvent]) -> list[int]:
    connection = connections[alias]
    adapt = connection.ops.adapt_datetimefield_value
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(events), SQLITE_CHUNK):
            chunk = events[start : start + SQLITE_CHUNK]
            params: list[Any] = []
            for e in chunk:
                params += [e.type, e.job_id, e.owner, e.data, adapt(e.created_at)]
            values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
            cursor.execute(f"INSERT INTO {TABLE} ({COLUMNS}) VALUES {values} RETURNING id", params)
            ids += [row[0] for row in cursor.fetchall()]
    return ids


def after(
    alias: str,
    last_id: int,
    *,
    upto: int | None = None,
    owner: str | None = None,
    job: int | None = None,
    limit: int = 500,
) -> list[StoredEvent]:
    """Events with ``last_id < id <= upto``, oldest first; only ``owner``'s when given, and
    only those of job ``job`` and of its children when given."""
    rows = JobEventRecord.objects.using(alias).filter(id__gt=last_id)
    if upto is not None:
        rows = rows.filter(id__lte=upto)
    if owner is not None:
        rows = rows.filter(owner=owner)
    if job is not None:
        children = Job.objects.using(alias).filter(parent_id=job).values("id")
        rows = rows.filter(Q(job_id=job) | Q(job_id__in=children))
    fields = ("id", "type", "job_id", "owner", "data")
    return [StoredEvent(*row) for row in rows.order_by("id").values_list(*fields)[:limit]]


def latest_id(alias: str) -> int:
    """The id of the newest event; 0 when there is none."""
    last = JobEventRecord.objects.using(alias).order_by("-id").values_list("id", flat=True)[:1]
    return next(iter(last), 0)


def oldest_id(alias: str) -> int | None:
    first = JobEventRecord.objects.using(alias).order_by("id").values_list("id", flat=True)[:1]
    return next(iter(first), None)


def exists(alias: str, event_id: int) -> bool:
    return JobEventRecord.objects.using(alias).filter(id=event_id).exists()


def prune(alias: str, cutoff: datetime, *, batch_size: int = 5000) -> int:
    """Delete the events created before ``cutoff``, oldest first, in batches; return how many.

    Ids follow creation (rows are stored in batches under the write lock, moments after they
    are made), so the old events are the ids below the first event created at or after
    ``cutoff``, found by bisection on the primary key: no index on ``created_at`` is
    written for every event. An event stored long after it was made (its process could not
    reach the database for a while) goes with the events stored around it.
    """
    rows = JobEventRecord.objects.using(alias)
    end = first_id_since(alias, cutoff)
    old = rows if end is None else rows.filter(id__lt=end)
    deleted = 0
    while True:
        ids = list(old.order_by("id").values_list("id", flat=True)[:batch_size])
        if not ids:
            return deleted
        # No relation points at the rows and no signal listens: Django deletes them in one
        # DELETE, without loading them.
        count, _ = rows.filter(id__in=ids).delete()
        deleted += count
        if len(ids) < batch_size:
            return deleted


def first_id_since(alias: str, cutoff: datetime) -> int | None:
    """The smallest event id created at or after ``cutoff`` (ids follow creation); ``None``
    when every event is older."""
    rows = JobEventRecord.objects.using(alias).order_by("id").values_list("id", "created_at")
    low, high = oldest_id(alias) or 0, latest_id(alias) + 1
    found: int | None = None
    # Invariant: every event below ``low`` is older than the cutoff; the first event at or
    # above ``high`` is ``found`` (made at or after the cutoff), or there is none.
    while low < high:
        middle = (low + high) // 2
        first = rows.filter(id__gte=middle).first()
        if first is not None and first[1] < cutoff:
            low = first[0] + 1
        else:
            high = middle
            found = first[0] if first is not None else None
    return found
