"""The statements on the event rows (``JobEventRecord``): insert (written by the store of the
alias, ``Store.insert_events``), read after an id, prune.

Ids are the order of events. On PostgreSQL an insert batch takes a transaction-level advisory
lock, so batches commit in id order: a reader that has seen id N never sees a smaller id
commit later, and "everything after my last id" is a complete answer. SQLite serializes
writers anyway. The NOTIFY (PostgreSQL) is delivered on commit and wakes the relays.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.models import Q

from ..models import Job, JobEventRecord
from . import get_store
from .event_rows import NewEvent, StoredEvent


def insert(alias: str, events: Sequence[NewEvent], *, ordered: bool = True) -> list[StoredEvent]:
    """Store ``events`` atomically (in a savepoint inside the caller's transaction) and NOTIFY;
    return them stored, with their ids, in the order given (which is the order of the ids).

    The store of ``alias`` writes them (``Store.insert_events``): one statement for the batch
    on PostgreSQL (``unnest``; write lock and NOTIFY included, so in autocommit it is one round
    trip), a multi-row ``VALUES`` per chunk on SQLite. ``ordered`` takes the write lock on
    PostgreSQL (see the module docstring); inside a longer transaction of the caller pass
    ``ordered=False``, or the lock is held until it ends.
    """
    if not events:
        return []
    return get_store(alias).insert_events(events, ordered=ordered)


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
