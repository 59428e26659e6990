"""The event row's names and shapes, shared by the job stores and the event store.

The job stores write a job's ``job.created`` row with the job (on PostgreSQL in the insert
statement itself, so it needs the table, the write lock and the NOTIFY channel of the
events), and write batches of event rows (``Store.insert_events``); ``store.events`` holds
the other statements on the rows, and the insert's entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, overload

from ..models import Job, JobEventRecord

#: The NOTIFY channel relays LISTEN on.
NOTIFY_CHANNEL = "django_jobs_events"
#: A fixed advisory-lock key for writing event rows ("djobevent" as digits).
WRITE_LOCK = 3_562_623_836_858
TABLE = JobEventRecord._meta.db_table
COLUMNS = "type, job_id, owner, data, created_at"
#: Rows per INSERT on SQLite: 5 bound variables each, under SQLite's 32,766.
SQLITE_CHUNK = 1000


class NewEvent(NamedTuple):
    """An event not yet stored (a named tuple: one is made for every event)."""

    type: str
    job_id: int
    owner: str | None
    data: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event row: ``id`` is its event id, ``data`` the JSON text sent to clients."""

    id: int
    type: str
    job_id: int
    owner: str | None
    data: str


def stored(events: Sequence[NewEvent], ids: list[int]) -> list[StoredEvent]:
    """The events as stored: the ids a statement drew for them, which follow their order (the
    rows are inserted in that order; only the ids come back, the rest was sent)."""
    return [
        StoredEvent(event_id, e.type, e.job_id, e.owner, e.data)
        for event_id, e in zip(sorted(ids), events, strict=True)
    ]


#: Makes a job's ``job.created`` row from the job as inserted (``publish.created_row``).
MakeRow = Callable[[Job], NewEvent]
#: The jobs a store's insert wrote, and the event rows it stored (or staged) with them.
Inserted = tuple[list[Job], Sequence[StoredEvent]]


class LazyRows(Sequence[StoredEvent]):
    """Event rows read from the database only when first looked at (``rows``)."""

    @property
    def rows(self) -> list[StoredEvent]:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> StoredEvent: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[StoredEvent]: ...
    def __getitem__(self, index: int | slice) -> StoredEvent | Sequence[StoredEvent]:
        return self.rows[index]


class Chained(LazyRows):
    """Event rows written by several inserts, in order, each part read only when looked at
    (a part may be rows staged for a commit: ``staged_events.StagedRows``)."""

    def __init__(self, parts: list[Sequence[StoredEvent]]) -> None:
        self.parts = parts

    @property
    def rows(self) -> list[StoredEvent]:
        return [row for part in self.parts for row in part]


def chained(parts: list[Sequence[StoredEvent]]) -> Sequence[StoredEvent]:
    """The rows of ``parts`` as one sequence: a list when every part is one (read nothing)."""
    if all(isinstance(part, list) for part in parts):
        return [row for part in parts for row in part]
    return parts[0] if len(parts) == 1 else Chained(parts)
