"""The insert of a batch of new jobs: one statement whatever the batch size, which also wakes
the jobs' engines and writes (or stages) their ``job.created`` rows."""

from __future__ import annotations

import functools
from typing import Any

from psycopg.types.numeric import Int8

from ..base.columns import TABLE
from ..base.new_job import BATCH_SHARED, INSERT_COLUMNS, NewJob, insert_sql
from ..event_rows import NOTIFY_CHANNEL as EVENTS_CHANNEL
from ..event_rows import TABLE as EVENTS_TABLE
from ..event_rows import WRITE_LOCK as EVENTS_WRITE_LOCK
from ..event_rows import NewEvent
from ..staged_events import STAGED_TABLE
from .ids import DRAW_IDS, NEXT_ID
from .listen import CHANNEL

_EVENT_IDS = f"(SELECT pg_get_serial_sequence('{EVENTS_TABLE}', 'id'))::regclass"

# An insert's source columns: the job's (one list, base.INSERT_COLUMNS), its id and, with
# events, its job.created row's owner and text. Name -> (type, differs per row in a batch).
_SOURCE = [(c.name, c.sql_type, c.per_row) for c in INSERT_COLUMNS]
_SOURCE_WITH_EVENTS = [
    ("id", "bigint", True),
    *_SOURCE,
    ("event_owner", "varchar", False),
    ("event_data", "text", True),
]
_TYPES = {name: sql_type for name, sql_type, _ in _SOURCE_WITH_EVENTS}
_VALUE_OF = {c.name: c.value for c in INSERT_COLUMNS}
_JOB_COLUMNS, _JOB_VALUES = insert_sql(
    [f"u.{c.name}::jsonb" if c.is_json else f"u.{c.name}" for c in INSERT_COLUMNS],
    booleans=("false", "true"),
    json_cast="::jsonb",
)


#: How an insert writes its jobs' ``job.created`` rows: not at all, stored in the events table
#: under the write lock (autocommit), or staged for the caller's commit to store them
#: (inside the caller's transaction: ``store/staged_events.py``).
NO_EVENTS, STORE_EVENTS, STAGE_EVENTS = "none", "store", "stage"


@functools.cache
def _insert_sql(shared: tuple[str, ...], per_row: tuple[str, ...], events: str) -> str:
    """One statement that inserts the rows and wakes their engines' workers; with ``events``
    (``STORE_EVENTS``) it also stores each inserted job's ``job.created`` row (whose text was
    made from the job, id included, before it was sent) and draws the ids of the next inserts
    (``JobIds``). ``STAGE_EVENTS`` writes the same rows to the staging table instead, without
    the lock or the events' NOTIFY (its trigger does both at commit).

    The ``shared`` columns are parameters sent once; the ``per_row`` ones arrays (``unnest``,
    in binary: psycopg dumps them about ten times faster than as text). A single row sends
    everything as plain parameters. Parameters: the shared values, the per-row arrays, the
    NOTIFY channel, and with ``events`` the event write lock, the event type, the events'
    NOTIFY channel and how many ids to draw.

    Without ``events`` the ids are drawn by the statement ("src" draws them first, so that an
    inserted row can be joined back to its source row: RETURNING cannot return the source's
    columns), and it returns each inserted row's ordinal in the source and its id. With
    ``events`` the ids are sent, and it returns a row per job inserted (its id and its event's
    id; staged: the events' newest id so far, below any id its commit draws) and one per id
    drawn ahead (NULL and the id).

    A CTE with a volatile function runs once (it is materialized); the main query joins each
    one's COUNT row only to make it run. The wake-up is empty when nothing was inserted and is
    delivered on commit only. The events' write lock (see store/events.py) is taken before the
    first event id is drawn: the event INSERT reads the "locked" row before it emits any row.
    Events go in job id order.
    """
    with_events = events != NO_EVENTS
    sent_once = "".join(f"%s::{_TYPES[name]} AS {name}, " for name in shared)
    ordinal = "" if with_events else " WITH ORDINALITY"
    if per_row:
        arrays = ", ".join(f"%b::{_TYPES[name]}[]" for name in per_row)
        names = ", ".join([*per_row, *([] if with_events else ["n"])])
        source = f"unnest({arrays}){ordinal} AS u({names})"
    else:
        source = "(VALUES (1::bigint)) AS u(n)"
    drawn = "" if with_events else f"{NEXT_ID} AS id, "
    sql = (
        f"WITH src AS (SELECT {drawn}{sent_once}u.* FROM {source}), "
        f"ins AS (INSERT INTO {TABLE} AS j (id, {_JOB_COLUMNS}) SELECT u.id, {_JOB_VALUES} "
        "FROM src AS u ON CONFLICT DO NOTHING RETURNING j.id, j.engine), "
        "woken AS (SELECT pg_notify(%s, e.engine) FROM (SELECT DISTINCT engine FROM ins) AS e)"
    )
    if not with_events:
        return (
            f"{sql} SELECT src.n, ins.id FROM ins JOIN src ON src.id = ins.id, "
            "(SELECT COUNT(*) FROM woken) AS w"
        )
    if events == STAGE_EVENTS:
        return (
            f"{sql}, "
            f"ev AS (INSERT INTO {STAGED_TABLE} (job_id, type, owner, data, created_at) "
            "SELECT ins.id, %s, src.event_owner, src.event_data, src.created_at "
            "FROM ins JOIN src ON src.id = ins.id RETURNING job_id), "
            f"ahead AS ({DRAW_IDS}) "
            f"SELECT ev.job_id, COALESCE(pg_sequence_last_value({_EVENT_IDS}), 0) FROM ev, "
            "(SELECT COUNT(*) FROM woken) AS w "
            "UNION ALL SELECT NULL, ahead.nextval FROM ahead"
        )
    return (
        f"{sql}, "
        "locked AS (SELECT pg_advisory_xact_lock(%s) FROM (SELECT 1 FROM ins LIMIT 1) AS one), "
        f"ev AS (INSERT INTO {EVENTS_TABLE} (type, job_id, owner, data, created_at) "
        "SELECT %s, ins.id, src.event_owner, src.event_data, src.created_at "
        "FROM ins JOIN src ON src.id = ins.id, (SELECT COUNT(*) FROM locked) AS l "
        "ORDER BY ins.id RETURNING id, job_id), "
        "told AS (SELECT pg_notify(%s, '') FROM (SELECT 1 FROM ev LIMIT 1) AS one), "
        f"ahead AS ({DRAW_IDS}) "
        "SELECT ins.id, ev.id FROM ins LEFT JOIN ev ON ev.job_id = ins.id, "
        "(SELECT COUNT(*) FROM woken) AS w, (SELECT COUNT(*) FROM told) AS t "
        "UNION ALL SELECT NULL, ahead.nextval FROM ahead"
    )


def insert_statement(
    rows: list[NewJob],
    created: tuple[list[int], list[NewEvent], int] | None = None,
    *,
    staged: bool = False,
) -> tuple[str, list[Any]]:
    """The insert statement for ``rows`` and its parameters (see ``_insert_sql``); with
    ``created``, the rows' ids, their job.created rows and how many ids to draw ahead, stored
    or (``staged``) staged for the commit."""
    source = _SOURCE
    sent: dict[str, list[Any]] = {}  # the values of the columns not on NewJob, row by row
    if created is not None:
        ids, events, ahead = created
        sent = {
            # Sent as bigint whatever their size: psycopg would send a small int as int2 or
            # int4, and keeps a prepared statement per (text, parameter types), so ids
            # growing past 2**15 and 2**31 would each prepare the insert again, with a round
            # trip of its own.
            "id": [Int8(job_id) for job_id in ids],
            "event_owner": [e.owner for e in events],
            "event_data": [e.data for e in events],
        }
        source = _SOURCE_WITH_EVENTS
    if len(rows) == 1:
        per_row: tuple[str, ...] = ()
    else:
        shared = BATCH_SHARED(rows[0])
        uniform = all(BATCH_SHARED(r) == shared for r in rows)
        per_row = tuple(name for name, _, differs in source if differs or not uniform)
    shared_names = tuple(name for name, _, _ in source if name not in per_row)
    first = rows[0]
    params: list[Any] = [
        sent[name][0] if name in sent else _VALUE_OF[name](first) for name in shared_names
    ]
    params += [sent[name] if name in sent else list(map(_VALUE_OF[name], rows)) for name in per_row]
    params.append(CHANNEL)
    if created is None:
        return _insert_sql(shared_names, per_row, NO_EVENTS), params
    if staged:
        params += [events[0].type, ahead]
        return _insert_sql(shared_names, per_row, STAGE_EVENTS), params
    params += [EVENTS_WRITE_LOCK, events[0].type, EVENTS_CHANNEL, ahead]
    return _insert_sql(shared_names, per_row, STORE_EVENTS), params
