"""The event row's names and shapes, shared by the job stores and the event store.

The job stores write a job's ``job.created`` row with the job (on PostgreSQL in the insert
statement itself, so it needs the table, the write lock and the NOTIFY channel of the
events); ``store.events`` holds the statements on the rows themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

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


#: Makes a job's ``job.created`` row from the job as inserted (``publish.created_row``).
MakeRow = Callable[[Job], NewEvent]
#: The jobs a store's insert wrote, and the event rows it stored with them.
Inserted = tuple[list[Job], list[StoredEvent]]
