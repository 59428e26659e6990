"""PostgreSQL: batch inserts with unnest, one-statement SKIP LOCKED claims, LISTEN/NOTIFY."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from operator import attrgetter
from typing import Any

from django.db.backends.postgresql.base import TIMESTAMPTZ_OID, ServerBindingCursor
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

from ..models import Job
from .base import BATCH_SHARED, COLUMNS, TABLE, ClaimSkip, NewJob, Outcome, Store
from .event_rows import NOTIFY_CHANNEL as EVENTS_CHANNEL
from .event_rows import TABLE as EVENTS_TABLE
from .event_rows import WRITE_LOCK as EVENTS_WRITE_LOCK
from .event_rows import StoredEvent

CHANNEL = "django_jobs"
# A fixed advisory-lock key for the scheduler's leader ("djobsched" as digits).
SCHEDULER_LOCK = 3_562_724_331_871
RETURNING = ", ".join(f"j.{c}" for c in COLUMNS)

# The columns an insert takes from the caller, with their types, in _source_values order.
_SOURCE = [
    ("kind", "varchar"),
    ("queue", "varchar"),
    ("engine", "varchar"),
    ("payload", "text"),
    ("owner_id", "bigint"),
    ("tenant", "varchar"),
    ("priority", "smallint"),
    ("max_attempts", "int"),
    ("key", "varchar"),
    ("version", "varchar"),
    ("captured", "text"),
    ("run_at", "timestamptz"),
    ("parent_id", "bigint"),
]


# Each source column's value on a NewJob.
_VALUE_OF: dict[str, Callable[[NewJob], Any]] = {
    "kind": attrgetter("kind"),
    "queue": attrgetter("queue"),
    "engine": attrgetter("engine"),
    "payload": NewJob.payload_text,
    "owner_id": attrgetter("owner_id"),
    "tenant": attrgetter("tenant"),
    "priority": attrgetter("priority"),
    "max_attempts": attrgetter("max_attempts"),
    "key": attrgetter("idempotency_key"),
    "version": attrgetter("version"),
    "captured": NewJob.captured_text,
    "run_at": attrgetter("run_at"),
    "parent_id": attrgetter("parent_id"),
    "event_head": lambda r: r.created_event[0],
    "event_tail": lambda r: r.created_event[1],
}
_TYPES = {**dict(_SOURCE), "event_head": "text", "event_tail": "text"}
# What differs between the rows of one enqueue_many: the rest is sent once, not per row.
_PER_ROW = ("payload", "key", "captured")

_JOB_COLUMNS = (
    "kind, queue, engine, state, payload, owner_id, tenant, priority, attempts, max_attempts, "
    "log, idempotency_key, version, captured, cancel_requested, wake_requested, run_at, "
    "created_at, timestamps_derived, parent_id, children_pending, children_total"
)
_JOB_VALUES = (
    "u.kind, u.queue, u.engine, 'queued', u.payload::jsonb, u.owner_id, u.tenant, u.priority, "
    "0, u.max_attempts, '[]'::jsonb, u.key, u.version, u.captured::jsonb, false, false, "
    "u.run_at, %s, false, u.parent_id, 0, 0"
)


@functools.cache
def _insert_sql(shared: tuple[str, ...], per_row: tuple[str, ...], events: bool) -> str:
    """One statement that inserts the rows, wakes their engines' workers and, with
    ``events``, stores each inserted job's ``job.created`` event row.

    The ``shared`` columns are parameters sent once; the ``per_row`` ones arrays (``unnest``,
    in binary: psycopg dumps them about ten times faster than as text). A single row sends
    everything as plain parameters. It returns, per inserted row, the row's ordinal in the
    source and its job id (and its event's id): the caller builds the jobs from what it
    sent. Parameters: the shared values, the per-row arrays, created_at, the NOTIFY channel,
    and with ``events`` the event write lock and the events' NOTIFY channel.

    "src" draws the job ids first, so an inserted row can be joined back to the source row
    (RETURNING cannot return the source's columns). A CTE with a volatile function runs once
    (it is materialized); the main query joins each one's COUNT row only to make it run. The
    wake-up is empty when nothing was inserted and is delivered on commit only. The events'
    write lock (see store/events.py) is taken before the first event id is drawn: the event
    INSERT reads the "locked" row before it emits any row. Events go in job id order.
    """
    sent_once = "".join(f"%s::{_TYPES[name]} AS {name}, " for name in shared)
    if per_row:
        arrays = ", ".join(f"%b::{_TYPES[name]}[]" for name in per_row)
        source = f"unnest({arrays}) WITH ORDINALITY AS u({', '.join(per_row)}, n)"
    else:
        source = "(VALUES (1::bigint)) AS u(n)"
    sql = (
        "WITH src AS (SELECT "
        f"nextval((SELECT pg_get_serial_sequence('{TABLE}', 'id'))::regclass) AS id, "
        f"{sent_once}u.* FROM {source}), "
        f"ins AS (INSERT INTO {TABLE} AS j (id, {_JOB_COLUMNS}) SELECT u.id, {_JOB_VALUES} "
        "FROM src AS u ON CONFLICT DO NOTHING RETURNING j.id, j.engine, j.owner_id, "
        "j.created_at), "
        "woken AS (SELECT pg_notify(%s, e.engine) FROM (SELECT DISTINCT engine FROM ins) AS e)"
    )
    if not events:
        return (
            f"{sql} SELECT src.n, ins.id FROM ins JOIN src ON src.id = ins.id, "
            "(SELECT COUNT(*) FROM woken) AS w"
        )
    return (
        f"{sql}, "
        "locked AS (SELECT pg_advisory_xact_lock(%s) FROM (SELECT 1 FROM ins LIMIT 1) AS one), "
        f"ev AS (INSERT INTO {EVENTS_TABLE} (type, job_id, owner, data, created_at) "
        "SELECT 'job.created', ins.id, ins.owner_id::text, "
        "src.event_head || ins.id::text || src.event_tail, ins.created_at "
        "FROM ins JOIN src ON src.id = ins.id, (SELECT COUNT(*) FROM locked) AS l "
        "ORDER BY ins.id RETURNING id, job_id), "
        "told AS (SELECT pg_notify(%s, '') FROM (SELECT 1 FROM ev LIMIT 1) AS one) "
        "SELECT src.n, ins.id, ev.id FROM ins JOIN src ON src.id = ins.id "
        "LEFT JOIN ev ON ev.job_id = ins.id, "
        "(SELECT COUNT(*) FROM woken) AS w, (SELECT COUNT(*) FROM told) AS t"
    )


def _statement(rows: list[NewJob]) -> tuple[str, list[Any]]:
    """The insert statement for ``rows`` and its parameters (see ``_insert_sql``)."""
    events = rows[0].created_event is not None
    names = [name for name, _ in _SOURCE]
    if events:
        names += ["event_head", "event_tail"]
    first = rows[0]
    if len(rows) == 1:
        per_row: tuple[str, ...] = ()
    else:
        shared = BATCH_SHARED(first)
        head = first.created_event[0] if events else None  # type: ignore[index]
        uniform = all(
            BATCH_SHARED(r) == shared and (not events or r.created_event[0] == head)  # type: ignore[index]
            for r in rows
        )
        if uniform:
            per_row = (*_PER_ROW, "event_tail") if events else _PER_ROW
        else:
            per_row = tuple(names)
    shared_names = tuple(name for name in names if name not in per_row)
    params: list[Any] = [_VALUE_OF[name](first) for name in shared_names]
    params += [list(map(_VALUE_OF[name], rows)) for name in per_row]
    params += [first.created_at, CHANNEL]
    if events:
        params += [EVENTS_WRITE_LOCK, EVENTS_CHANNEL]
    return _insert_sql(shared_names, per_row, events), params


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
        return super().execute(query, params, prepare=prepare, **kw)


class _PlanningCursor(ServerBindingCursor):
    """A server-side-binding cursor whose statements are never prepared: planned on each
    execution, for the table as it is then (see ``Store.planned_cursor``)."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = False, **kw: Any
    ) -> Any:
        return super().execute(query, params, prepare=False, **kw)


class PostgresStore(Store):
    vendor = "postgresql"
    insert_is_one_statement = True
    inserts_in_row_order = True
    inserts_created_events = True
    json_param = "%s::jsonb"

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        return "= ANY(%s)", [list(values)]

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
                cursor: Any = _PlanningCursor(raw)
            else:
                cursor = (_PreparingCursor if prepares else ServerBindingCursor)(raw)
            tz_loader = raw.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
            if db.timezone != tz_loader.timezone:
                register_tzloader(db.timezone, cursor)
        db.validate_thread_sharing()
        return db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)

    def _insert_rows(self, rows: list[NewJob]) -> list[Job]:
        # One statement whatever the batch size (see _insert_sql); each shape keeps one text
        # and gets prepared. ON CONFLICT DO NOTHING skips rows whose key a live job holds
        # (the partial unique index); the caller reads those back. The jobs are built from
        # the rows sent: reading every column back, and decoding it, costs more than the
        # insert.
        sql, params = _statement(rows)
        with self.prepared_cursor() as cursor:
            cursor.execute(sql, params)
            inserted = cursor.fetchall()
        inserted.sort()  # by the row's ordinal: the jobs come back in the order of their rows
        jobs = Job.built(self.alias, [rows[n - 1].inserted(job_id) for n, job_id, *_ in inserted])
        if rows[0].created_event is not None:
            for job, (n, job_id, event_id) in zip(jobs, inserted, strict=True):
                row = rows[n - 1]
                head, tail = row.created_event  # type: ignore[misc]
                owner = None if row.owner_id is None else str(row.owner_id)
                job.__dict__["_created_event"] = StoredEvent(
                    event_id, "job.created", job_id, owner, f"{head}{job_id}{tail}"
                )
        return jobs

    def try_scheduler_lock(self) -> bool:
        # Released when the tick's transaction ends; a second scheduler skips its tick.
        return bool(self.fetchall("SELECT pg_try_advisory_xact_lock(%s)", [SCHEDULER_LOCK])[0][0])

    def notify(self, engines: set[str]) -> None:
        # Sent inside the enqueuing transaction: PostgreSQL delivers it only on commit, so a
        # rolled-back enqueue wakes nobody.
        with self.connection.cursor() as cursor:
            for engine in sorted(engines):
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, engine])

    def claim_statement(
        self,
        *,
        engine: str | None,
        worker_id: str,
        limit: int,
        now: datetime,
        leased_until: datetime,
        queues: list[str] | None = None,
        skip: ClaimSkip | None = None,
    ) -> tuple[str, list[Any]]:
        # The CTE picks and locks the next due rows in claim order, skipping rows another
        # worker holds; the UPDATE marks them ours in the same statement. The CTE is also an
        # optimisation fence: the LIMIT applies before the update, on the partial claim index.
        where, params = self.claim_filters(engine=engine, now=now, queues=queues, skip=skip)
        if skip is not None and skip.fair:
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
            [*params, limit, worker_id, leased_until, now],
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
                "wait_reason = NULL, progress = COALESCE(u.progress::jsonb, j.progress), "
                "log = COALESCE(u.log::jsonb, j.log), worker_id = NULL, leased_until = NULL "
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
