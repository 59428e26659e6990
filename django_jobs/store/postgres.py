"""PostgreSQL: batch inserts with unnest, one-statement SKIP LOCKED claims, LISTEN/NOTIFY."""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db.backends.postgresql.base import TIMESTAMPTZ_OID, ServerBindingCursor
from django.db.backends.postgresql.psycopg_any import register_tzloader
from django.db.models import Model
from psycopg.pq import Format
from psycopg.types.numeric import Int8

from ..models import Job
from ..states import ENDED_STATES
from .base import (
    BATCH_SHARED,
    COLUMNS,
    ENDED,
    INSERT_COLUMNS,
    PRUNED_TABLE,
    STEP_TABLE,
    TABLE,
    Claim,
    NewJob,
    Outcome,
    StepRow,
    Store,
    insert_sql,
)
from .event_rows import NOTIFY_CHANNEL as EVENTS_CHANNEL
from .event_rows import TABLE as EVENTS_TABLE
from .event_rows import WRITE_LOCK as EVENTS_WRITE_LOCK
from .event_rows import Inserted, MakeRow, NewEvent, StoredEvent
from .staged_events import STAGED_TABLE, StagedRows, staging_table

CHANNEL = "django_jobs"
#: A worker's own channel for its jobs' cancels: this prefix and a digest of its worker id
#: (a channel name is an identifier of at most 63 bytes; a worker id may be longer).
CANCEL_CHANNEL_PREFIX = "django_jobs_cancel_"
#: Workers hear on it that a queue of an engine (the payload) was paused or resumed.
PAUSED_CHANNEL = "django_jobs_paused"
# A fixed advisory-lock key for the scheduler's leader ("djobsched" as digits).
SCHEDULER_LOCK = 3_562_724_331_871
RETURNING = ", ".join(f"j.{c}" for c in COLUMNS)


class JobIds:
    """Job ids drawn ahead from the table's sequence, kept per database alias for this process.

    Why the ids are drawn before the insert: the insert also writes each job's ``job.created``
    row, whose text (``serialize.event_text``, the one encoder of the job JSON) holds the
    job's id. Ids drawn by the insert statement itself could not be in a text made before it.
    So each insert that stores ``job.created`` draws, besides the rows it inserts, the ids of
    the next ones (``ahead``): an enqueue stays one round trip. A process's first enqueue, one
    after more than ``MAX_AGE`` seconds without any, and a batch larger than what is in hand
    draw theirs with a statement of their own first. An insert that stores no event (inside
    the caller's transaction, or live events off) draws its ids itself, as before.

    Weighed against the other way (the insert draws the ids and returns them; a second,
    batched statement writes the event rows from them): that is two round trips, two
    transactions in autocommit, and a ``job.started`` could be stored before its
    ``job.created``. Drawn ahead, the ids of one process increase but interleave with other
    processes' by up to ``MAX_AGE``: "newest first" lists follow creation to within that.
    Ids are never reused: a sequence never gives one twice, and those a process drew but did
    not use leave gaps, as rolled-back inserts always did. The cache is per process (a forked
    child starts without the parent's ids) and shared by its threads, which take its ids in
    increasing order even when two of them drew at once (``add``).
    """

    #: Ids in hand older than this are dropped: they would sort before newer jobs of others.
    MAX_AGE = 2.0
    #: Ids kept in hand at the least (a few threads enqueuing at once draw no more often).
    MIN_AHEAD = 8
    #: Ids an insert draws ahead at the most (a larger batch draws its own first).
    MAX_AHEAD = 1000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # alias -> the ids in hand, in order, each with when it was drawn
        self._held: dict[str, deque[tuple[float, int]]] = {}

    def _in_hand(self, alias: str) -> deque[tuple[float, int]]:
        if self._pid != os.getpid():  # forked: the parent's ids are the parent's
            self._pid, self._held = os.getpid(), {}
        return self._held.setdefault(alias, deque())

    def take(self, alias: str, n: int) -> tuple[list[int] | None, int]:
        """``n`` ids in hand, or None when there are too few; and how many to draw ahead."""
        with self._lock:
            held = self._in_hand(alias)
            too_old = self.clock() - self.MAX_AGE
            while held and held[0][0] < too_old:
                held.popleft()
            taken = [held.popleft()[1] for _ in range(n)] if len(held) >= n else None
            wanted = min(max(n, self.MIN_AHEAD), self.MAX_AHEAD)
            return taken, max(0, wanted - len(held))

    def add(self, alias: str, ids: list[int]) -> None:
        """Keep ``ids``, drawn just now, in hand."""
        with self._lock:
            now = self.clock()
            held, drawn = self._in_hand(alias), sorted(ids)
            if held and drawn and drawn[0] < held[-1][1]:
                # Threads that drew at the same moment kept their ids in another order than
                # the sequence gave them. Merged, so that ids are still taken in increasing
                # order (a batch's job.created rows are stored in id order), each stamped as
                # old as the oldest in hand: none is kept past MAX_AGE.
                now = held[0][0]
                drawn = sorted([job_id for _, job_id in held] + drawn)
                held.clear()
            held.extend((now, job_id) for job_id in drawn)

    def held(self, alias: str) -> list[int]:
        """The ids in hand for ``alias`` (the next inserts take them in this order)."""
        with self._lock:
            return [job_id for _, job_id in self._in_hand(alias)]

    def forget(self) -> None:
        """Drop every id in hand: for a sequence restarted under this process (``TRUNCATE ...
        RESTART IDENTITY``, as the benchmark empties the table), whose ids would come again."""
        with self._lock:
            self._held.clear()


job_ids = JobIds()

_NEXT_ID = f"nextval((SELECT pg_get_serial_sequence('{TABLE}', 'id'))::regclass)"
_EVENT_IDS = f"(SELECT pg_get_serial_sequence('{EVENTS_TABLE}', 'id'))::regclass"
_DRAW_IDS = f"SELECT {_NEXT_ID} FROM generate_series(1, %s)"

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
    drawn = "" if with_events else f"{_NEXT_ID} AS id, "
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
            f"ahead AS ({_DRAW_IDS}) "
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
        f"ahead AS ({_DRAW_IDS}) "
        "SELECT ins.id, ev.id FROM ins LEFT JOIN ev ON ev.job_id = ins.id, "
        "(SELECT COUNT(*) FROM woken) AS w, (SELECT COUNT(*) FROM told) AS t "
        "UNION ALL SELECT NULL, ahead.nextval FROM ahead"
    )


def _statement(
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


# A step's first attempt (``Store.insert_steps``), fenced per row: inserted only while the
# run that wrote it (worker id, attempt; NULL: no worker) still holds the job. "state || ''"
# as in _record_successes: the job is looked up by its id. ``source`` gives the rows.
_INSERT_STEP = (
    f"INSERT INTO {STEP_TABLE} AS s (job_id, name, seq, key, state, attempts, started_at, "
    "value, error, ended_at) SELECT u.job_id, u.name, u.seq, u.key, u.state, 1, u.started_at, "
    "u.value::jsonb, u.error, u.ended_at FROM {source} "
    f"WHERE u.worker_id IS NULL OR EXISTS (SELECT 1 FROM {TABLE} AS j WHERE j.id = u.job_id "
    "AND j.worker_id = u.worker_id AND j.state || '' = 'running' AND j.attempts = u.attempt) "
    "RETURNING s.job_id, s.name, s.id"
)
_STEP_COLUMNS = (
    "job_id, name, seq, key, state, started_at, value, error, ended_at, worker_id, attempt"
)
_STEP_TYPES = (
    "bigint", "text", "int", "text", "text", "timestamptz", "text", "text", "timestamptz",
    "text", "int",
)  # fmt: skip
_ONE_STEP = f"(SELECT {', '.join(f'%s::{t}' for t in _STEP_TYPES)}) AS u({_STEP_COLUMNS})"
_STEP_ARRAYS = f"unnest({', '.join(f'%b::{t}[]' for t in _STEP_TYPES)}) AS u({_STEP_COLUMNS})"
_INSERT_ONE_STEP = _INSERT_STEP.format(source=_ONE_STEP)
_INSERT_STEPS = _INSERT_STEP.format(source=_STEP_ARRAYS)


def _step_values(row: StepRow, value: str | None) -> tuple[Any, ...]:
    """A step row's values in the order of ``_STEP_COLUMNS``, but the fence's two."""
    return (
        row.job_id,
        row.name,
        row.seq,
        row.key,
        row.state,
        row.started_at,
        value,
        row.error,
        row.ended_at,
    )


#: A psycopg prepare_threshold no statement reaches by count: only the engine's own statements,
#: which ask for it, are prepared (Django's client-side-binding cursors never are).
NEVER_BY_COUNT = 2**31 - 1


def engine_prepares(settings_dict: dict[str, Any]) -> bool:
    """May the engine prepare its hot statements on this database?

    Yes, unless the settings say prepared statements must not be used: an explicit
    ``OPTIONS["prepare_threshold"] = None``, or ``DISABLE_SERVER_SIDE_CURSORS`` (what Django
    asks of a site behind PgBouncer in transaction mode, where a statement prepared on one
    server connection is missing on the next before PgBouncer 1.21; from 1.21 on,
    ``max_prepared_statements`` > 0 makes them safe). A numeric threshold is the user's own
    tuning: psycopg applies it, and the engine's statements are prepared at once.
    """
    options = settings_dict.get("OPTIONS") or {}
    if "prepare_threshold" in options and options["prepare_threshold"] is None:
        return False
    return not settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")


class _PreparingCursor(ServerBindingCursor):
    """A server-side-binding cursor that prepares every statement on its first execution.

    Why: an enqueue is one large statement (a CTE with nextval, ON CONFLICT on a partial
    index, the events' advisory lock, an event insert, two NOTIFYs) and PostgreSQL spent more
    time planning it afresh than running it. Prepared once per connection, an enqueue in
    autocommit with Django's default options went from about 1,060 to 1,850 jobs/s (one
    process, alternating blocks with and without), and measured side by side
    (``python -m bench``, docs/performance.md) from 0.22x to 0.76x the bare psycopg
    insert+NOTIFY and from 0.62x to 2.2x Procrastinate's defer. The engine's statements have
    a handful of texts (one per batch shape), far under psycopg's cache of 100 per connection.
    Used only when ``engine_prepares`` allows it.
    """

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = True, **kw: Any
    ) -> Any:
        return super().execute(query, params, prepare=prepare, **kw)  # type: ignore[misc]  # a psycopg Cursor (django-stubs lack the base)


class _PlanningCursor(ServerBindingCursor):
    """A server-side-binding cursor whose statements are never prepared: planned on each
    execution, for the table as it is then (see ``Store.planned_cursor``)."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = False, **kw: Any
    ) -> Any:
        return super().execute(query, params, prepare=False, **kw)  # type: ignore[misc]  # a psycopg Cursor (django-stubs lack the base)


# libpq options a worker sets on its connections unless the project's OPTIONS set them
# (``Store.worker_connection_options``): without them a silent network (packets dropped, no
# reset) holds a statement for the kernel's retransmissions (about 15 minutes), and an idle
# connection, such as LISTEN's, never learns that the server went away. With them, bytes
# unacknowledged for tcp_user_timeout fail the connection, and so do keepalives_count
# unanswered probes on a connection that is idle or waiting on a reply (after 25 s), and a
# connection attempt after connect_timeout; the worker then reconnects with backoff. A long
# query on a healthy network is not cut short.
SILENT_NETWORK_BOUNDS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
    "connect_timeout": 10,
}


class _Listener:
    """A LISTENing autocommit connection of its own (see ``base.Listener``)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def wait(self, timeout: float) -> list[str]:
        return [payload for _, payload in self.wait_notifications(timeout)]

    def wait_notifications(self, timeout: float) -> list[tuple[str, str]]:
        # stop_after=1: back as soon as one arrives; the others wait for the next call.
        return [
            (n.channel, n.payload) for n in self._connection.notifies(timeout=timeout, stop_after=1)
        ]

    def close(self) -> None:
        self._connection.close()


class PostgresStore(Store):
    vendor = "postgresql"
    insert_is_one_statement = True
    inserts_in_row_order = True
    json_param = "%s::jsonb"

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        return "= ANY(%s)", [list(values)]

    def stages_created_events(self) -> bool:
        return staging_table.ready(self.alias)

    def prepared_cursor(self) -> Any:
        # Server-side binding: the parameters travel apart from the SQL text, so each hot
        # statement has one text, and the engine prepares it on first use (see
        # _PreparingCursor). Django's own cursors bind on the client, which also costs a
        # literal per array element.
        return self._server_cursor(prepare=True)

    def planned_cursor(self) -> Any:
        # Server-side binding, never prepared (see Store.planned_cursor).
        return self._server_cursor(prepare=False)

    def _server_cursor(self, *, prepare: bool) -> Any:
        db = self.connection
        db.close_if_health_check_failed()
        db.ensure_connection()
        with db.wrap_database_errors:
            raw = db.connection
            prepares = engine_prepares(db.settings_dict)
            if prepares and raw.prepare_threshold is None:
                # Django's default (None) would turn off every prepare, ours included. A
                # threshold no query reaches keeps the user's own queries as they were.
                raw.prepare_threshold = NEVER_BY_COUNT
            if not prepare:
                cursor: Any = _PlanningCursor(raw)  # type: ignore[call-arg]  # as above
            else:
                kind = _PreparingCursor if prepares else ServerBindingCursor
                cursor = kind(raw)  # type: ignore[call-arg]
            tz_loader = raw.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
            if db.timezone != tz_loader.timezone:
                register_tzloader(db.timezone, cursor)
        db.validate_thread_sharing()
        return db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)

    def _insert_rows(self, rows: list[NewJob], created: MakeRow | None) -> Inserted:
        # One statement whatever the batch size (see _insert_sql); each shape keeps one text
        # and gets prepared. ON CONFLICT DO NOTHING skips rows whose key a live job holds
        # (the partial unique index); the caller reads those back. The jobs are built from
        # the rows sent and their ids: reading every column back, and decoding it, costs more
        # than the insert.
        if created is None:
            sql, params = _statement(rows)
            with self.prepared_cursor() as cursor:
                cursor.execute(sql, params)
                inserted = cursor.fetchall()
            inserted.sort()  # by the row's ordinal: the jobs come back in the order of rows
            built = [rows[n - 1].inserted(job_id) for n, job_id in inserted]
            return Job.built(self.alias, built), []
        # The job.created rows are made from the jobs, ids included: the ids are drawn ahead
        # (see JobIds).
        ids, ahead = job_ids.take(self.alias, len(rows))
        if ids is None:
            drawn = [row[0] for row in self.fetchall(_DRAW_IDS, [len(rows) + ahead])]
            ids, ahead = drawn[: len(rows)], 0
            job_ids.add(self.alias, drawn[len(rows) :])
        built = [row.inserted(job_id) for row, job_id in zip(rows, ids, strict=True)]
        jobs = Job.built(self.alias, built)
        events = [created(job) for job in jobs]
        # Inside the caller's transaction the rows are staged for its commit to store
        # (admission passes ``created`` there only when the staging table is ready).
        staged = self.connection.in_atomic_block
        sql, params = _statement(rows, (ids, events, ahead), staged=staged)
        with self.prepared_cursor() as cursor:
            cursor.execute(sql, params)
            returned = cursor.fetchall()
        job_ids.add(self.alias, [drawn_id for job_id, drawn_id in returned if job_id is None])
        if staged:
            bounds = {job_id: bound for job_id, bound in returned if job_id is not None}
            inserted = [job for job in jobs if job.pk in bounds]
            after_id = min(bounds.values(), default=0)
            return inserted, StagedRows(self.alias, [job.pk for job in inserted], after_id)
        event_ids = {job_id: event_id for job_id, event_id in returned if job_id is not None}
        stored = [
            StoredEvent(event_ids[e.job_id], e.type, e.job_id, e.owner, e.data)
            for e in events
            if e.job_id in event_ids
        ]
        if len(event_ids) == len(jobs):
            return jobs, stored
        return [job for job in jobs if job.pk in event_ids], stored

    def insert_steps(self, rows: list[StepRow]) -> list[int | None]:
        # Prepared statements, one text for one row and one for many (arrays in binary, %b),
        # so the step writer's group commit (engine/step_writer.py) is one round trip. Each
        # row keeps its own fence: a row whose run lost its job is not inserted, the others
        # are. One row goes as plain parameters: psycopg's array dumpers cost about twice the
        # client CPU of scalars for a single row (measured: 190 against 95 us per statement),
        # and one row is what a worker's lone thread, or ``run_until_idle``, writes.
        with self.prepared_cursor() as cursor:
            if len(rows) == 1:
                [row] = rows
                worker_id, attempt = row.held or (None, None)
                cursor.execute(
                    _INSERT_ONE_STEP,
                    [*_step_values(row, self.js(row.value)), worker_id, attempt],
                )
                found = cursor.fetchall()
                return [found[0][2] if found else None]
            columns = zip(*(_step_values(row, self.js(row.value)) for row in rows), strict=True)
            cursor.execute(
                _INSERT_STEPS,
                [
                    *map(list, columns),
                    [r.held[0] if r.held else None for r in rows],
                    [r.held[1] if r.held else None for r in rows],
                ],
            )
            stored = {(job_id, name): step_id for job_id, name, step_id in cursor.fetchall()}
        return [stored.get((r.job_id, r.name)) for r in rows]

    def try_scheduler_lock(self) -> bool:
        # Released when the tick's transaction ends; a second scheduler skips its tick.
        return bool(self.fetchall("SELECT pg_try_advisory_xact_lock(%s)", [SCHEDULER_LOCK])[0][0])

    def notify_cancel(self, cancels: list[tuple[str, int]]) -> None:
        # In the cancel's transaction: delivered on commit, to the worker holding the job.
        with self.connection.cursor() as cursor:
            for worker_id, job_id in cancels:
                cursor.execute(
                    "SELECT pg_notify(%s, %s)", [self.cancel_channel(worker_id), str(job_id)]
                )

    def notify_paused(self, engines: set[str]) -> None:
        # In the pause's transaction: the workers read their paused set again on commit.
        with self.connection.cursor() as cursor:
            for engine in sorted(engines):
                cursor.execute("SELECT pg_notify(%s, %s)", [PAUSED_CHANNEL, engine])

    def notify(self, engines: set[str]) -> None:
        # Sent inside the enqueuing transaction: PostgreSQL delivers it only on commit, so a
        # rolled-back enqueue wakes nobody.
        with self.connection.cursor() as cursor:
            for engine in sorted(engines):
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, engine])

    # -- capabilities (see Store) ---------------------------------------------------------------

    supports_listen = True
    supports_skip_locked = True
    estimates_row_counts = True
    inserts_events_in_one_statement = True
    # NOTIFY wakes an idle worker at once: the poll is only the fallback for a lost one.
    poll_interval_default = 2.0
    worker_connection_options = SILENT_NETWORK_BOUNDS

    def _listen(self, *channels: str) -> _Listener:
        db = self.connection
        # A connection of its own, with the alias's settings: a LISTEN must outlive the
        # transactions of the thread that waits on it.
        connection = db.get_new_connection(db.get_connection_params())
        try:
            connection.autocommit = True
            for channel in channels:
                connection.execute(f"LISTEN {channel}")
        except BaseException:
            connection.close()
            raise
        return _Listener(connection)

    paused_channel = PAUSED_CHANNEL

    def cancel_channel(self, worker_id: str) -> str:
        return CANCEL_CHANNEL_PREFIX + hashlib.sha256(worker_id.encode()).hexdigest()[:24]

    def listen_for_jobs(self, worker_id: str | None = None) -> _Listener:
        if worker_id is None:
            return self._listen(CHANNEL)
        return self._listen(CHANNEL, self.cancel_channel(worker_id), PAUSED_CHANNEL)

    def listen_for_events(self) -> _Listener:
        return self._listen(EVENTS_CHANNEL)

    def estimated_rows(self, model: type[Model]) -> int | None:
        # pg_class.reltuples: kept fresh by autovacuum's ANALYZE; -1 when the table was never
        # vacuumed or analyzed (then the caller counts).
        rows = self.fetchall(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
            [self.connection.ops.quote_name(model._meta.db_table)],
        )
        return rows[0][0] if rows and rows[0][0] >= 0 else None

    def prune_jobs(self, job_ids: list[int]) -> tuple[int, int]:
        # One statement: the jobs, their steps, their children's link and the tally, all from
        # the same snapshot. A child deleted in the same statement is not also unlinked (a row
        # changed twice in one statement is an error); foreign keys are checked at commit.
        # The steps and the children are looked up by the ids themselves (an index condition
        # on job_id and parent_id), "gone" only filtering: the plan then rests on the ids
        # given, not on the planner's guess of a CTE's rows. Measured: 37 ms for a batch of
        # 2,000 jobs and 20,000 steps, 1.2 million steps in the table, both lookups on indexes.
        if not job_ids:
            return 0, 0
        ids = list(job_ids)
        rows = self.fetchall(
            f"WITH gone AS (DELETE FROM {TABLE} WHERE id = ANY(%s) AND {ENDED} = ANY(%s) "
            "RETURNING id, kind, state), "
            f"steps AS (DELETE FROM {STEP_TABLE} WHERE job_id = ANY(%s) "
            "AND job_id IN (SELECT id FROM gone) RETURNING 1), "
            f"orphans AS (UPDATE {TABLE} SET parent_id = NULL WHERE parent_id = ANY(%s) "
            "AND parent_id IN (SELECT id FROM gone) AND id NOT IN (SELECT id FROM gone)), "
            f"tally AS (INSERT INTO {PRUNED_TABLE} (kind, state, count) "
            "SELECT kind, state, COUNT(*) FROM gone GROUP BY kind, state "
            f"ON CONFLICT (kind, state) DO UPDATE SET count = {PRUNED_TABLE}.count "
            "+ excluded.count) "
            "SELECT (SELECT COUNT(*) FROM gone), (SELECT COUNT(*) FROM steps)",
            [ids, list(ENDED_STATES), ids, ids],
        )
        return rows[0][0], rows[0][1]

    def claim_statement(self, request: Claim) -> tuple[str, list[Any]]:
        # The CTE picks and locks the next due rows in claim order, skipping rows another
        # worker holds; the UPDATE marks them ours in the same statement. The CTE is also an
        # optimisation fence: the LIMIT applies before the update, on the partial claim index.
        where, params = self.claim_filters(request)
        if request.skip is not None and request.skip.fair:
            pick = (
                f"SELECT id FROM {TABLE} WHERE id IN ({self.fair_pick_sql(where)}) "
                "ORDER BY priority, run_at, id FOR UPDATE SKIP LOCKED"
            )
        else:
            pick = (
                f"SELECT id FROM {TABLE} WHERE {where} "
                "ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
            )
        return (
            f"WITH picked AS ({pick}) UPDATE {TABLE} AS j SET state = 'running', "
            "attempts = j.attempts + CASE WHEN j.state = 'queued' THEN 1 ELSE 0 END, "
            "worker_id = %s, leased_until = %s, started_at = %s, wake_requested = false "
            f"FROM picked WHERE j.id = picked.id RETURNING {RETURNING}",
            [*params, request.limit, request.worker_id, request.leased_until, request.now],
        )

    def _record_successes(self, outcomes: list[Outcome]) -> list[tuple[int, int | None]]:
        # The hot path: every success of a batch in one statement (arrays in binary, %b).
        # "state || ''" keeps the planner off the partial indexes on state: during a drain
        # they hold an entry for every row that was running since the last vacuum, and a
        # bitmap scan walks them all on each batch (it never marks them dead). Each row is
        # looked up by id instead.
        with self.prepared_cursor() as cursor:
            cursor.execute(
                f"UPDATE {TABLE} AS j SET state = 'succeeded', result = u.result::jsonb, "
                "error = NULL, started_at = u.started_at, ended_at = u.ended_at, "
                "first_started_at = COALESCE(j.first_started_at, u.started_at), "
                "wait_reason = NULL, progress = COALESCE(u.progress::jsonb, j.progress), "
                "log = COALESCE(u.log::jsonb, j.log), leased_until = NULL, "
                "cancel_requested = false "
                "FROM unnest(%b::bigint[], %b::text[], %b::timestamptz[], %b::timestamptz[], "
                "%b::text[], %b::text[]) AS u(id, result, started_at, ended_at, progress, log) "
                "WHERE j.id = u.id AND j.worker_id = %s AND j.state || '' = 'running' "
                "RETURNING j.id, j.parent_id",
                [
                    [o.job_id for o in outcomes],
                    [self.js(o.result) for o in outcomes],
                    [o.started_at for o in outcomes],
                    [o.ended_at for o in outcomes],
                    [self.js(o.progress) for o in outcomes],
                    [self.js(o.log) for o in outcomes],
                    outcomes[0].worker_id,
                ],
            )
            # The parent id comes back with the row (the one statement still): only a batch
            # holding children pays for a second one, the parents' decrement.
            return [(row[0], row[1]) for row in cursor.fetchall()]

    def _decrement(self, counts: dict[int, int], now: datetime) -> list[tuple[int, str]]:
        # Every parent of the batch in one statement. "locked" takes the parents' row locks in
        # id order first, so two workers' batches never wait on each other in a cycle; the
        # UPDATE then reads each parent's latest count (a child ending at the same instant on
        # another worker committed before our lock was granted), so exactly one sees zero.
        parent_ids = sorted(counts)
        with self.prepared_cursor() as cursor:
            cursor.execute(
                "WITH d AS (SELECT * FROM unnest(%b::bigint[], %b::int[]) AS d(id, n)), "
                f"locked AS (SELECT p.id FROM {TABLE} AS p JOIN d ON p.id = d.id "
                "ORDER BY p.id FOR UPDATE OF p) "
                f"UPDATE {TABLE} AS j SET children_pending = j.children_pending - d.n, "
                "run_at = CASE WHEN j.children_pending - d.n <= 0 AND j.state = 'waiting' "
                "THEN %b::timestamptz ELSE j.run_at END, "
                "wake_requested = j.wake_requested "
                "OR (j.children_pending - d.n <= 0 AND j.state = 'running') "
                "FROM d JOIN locked ON locked.id = d.id WHERE j.id = d.id "
                "RETURNING j.children_pending, j.engine",
                [parent_ids, [counts[p] for p in parent_ids], now],
            )
            return [(row[0], row[1]) for row in cursor.fetchall()]
