"""PostgreSQL: batch inserts with unnest, one-statement SKIP LOCKED claims, LISTEN/NOTIFY."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.backends.postgresql.base import TIMESTAMPTZ_OID, ServerBindingCursor
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

from ..events.store import NOTIFY_CHANNEL as EVENTS_CHANNEL
from ..events.store import TABLE as EVENTS_TABLE
from ..events.store import WRITE_LOCK as EVENTS_WRITE_LOCK
from ..events.store import StoredEvent
from ..models import Job
from .base import COLUMNS, TABLE, ClaimSkip, NewJob, Outcome, Store

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
]


def _source_values(r: NewJob) -> tuple[Any, ...]:
    return (
        r.kind,
        r.queue,
        r.engine,
        r.payload_text(),
        r.owner_id,
        r.tenant,
        r.priority,
        r.max_attempts,
        r.idempotency_key,
        r.version,
        r.captured_text(),
        r.run_at,
    )


_JOB_COLUMNS = (
    "kind, queue, engine, state, payload, owner_id, tenant, priority, attempts, max_attempts, "
    "log, idempotency_key, version, captured, cancel_requested, wake_requested, run_at, "
    "created_at, timestamps_derived"
)
_JOB_VALUES = (
    "u.kind, u.queue, u.engine, 'queued', u.payload::jsonb, u.owner_id, u.tenant, u.priority, "
    "0, u.max_attempts, '[]'::jsonb, u.key, u.version, u.captured::jsonb, false, false, "
    "u.run_at, %s, false"
)
_SOURCE_NAMES = ", ".join(name for name, _ in _SOURCE)


def _insert_sql(source: str) -> str:
    # Parameters: created_at, the source's, then the NOTIFY channel. The "woken" CTE runs
    # once (a CTE with a volatile function is materialized) and is empty when nothing was
    # inserted; the main query joins its single COUNT row only to make it run.
    return (
        f"WITH ins AS (INSERT INTO {TABLE} AS j ({_JOB_COLUMNS}) SELECT {_JOB_VALUES} "
        f"FROM {source} AS u({_SOURCE_NAMES}) ON CONFLICT DO NOTHING RETURNING {RETURNING}), "
        "woken AS (SELECT pg_notify(%s, e.engine) FROM (SELECT DISTINCT engine FROM ins) AS e) "
        "SELECT ins.* FROM ins, (SELECT COUNT(*) FROM woken) AS w"
    )


def _insert_with_events_sql(source: str) -> str:
    # As _insert_sql, and each inserted job's job.created event row in the same statement, so
    # an enqueue in autocommit stays one round trip. Parameters: the source's (plus each
    # event's text before and after the job id, and the row's ordinal), created_at, the
    # NOTIFY channel, the event write lock, the events' NOTIFY channel.
    #
    # "src" draws the job ids first, so an event row can be joined to the source row it was
    # made from (RETURNING cannot return the source's columns). The write lock (see
    # events/store.py) is taken before the first event id is drawn: the event INSERT reads
    # the "locked" row before it emits any row. Events are inserted in job id order.
    return (
        f"WITH src AS (SELECT nextval((SELECT pg_get_serial_sequence('{TABLE}', 'id'))::regclass)"
        f" AS id, u.* FROM {source} AS u({_SOURCE_NAMES}, event_head, event_tail, n)), "
        f"ins AS (INSERT INTO {TABLE} AS j (id, {_JOB_COLUMNS}) SELECT u.id, {_JOB_VALUES} "
        f"FROM src AS u ON CONFLICT DO NOTHING RETURNING {RETURNING}), "
        "woken AS (SELECT pg_notify(%s, e.engine) FROM (SELECT DISTINCT engine FROM ins) AS e), "
        "locked AS (SELECT pg_advisory_xact_lock(%s) FROM (SELECT 1 FROM ins LIMIT 1) AS one), "
        f"ev AS (INSERT INTO {EVENTS_TABLE} (type, job_id, owner, data, created_at) "
        "SELECT 'job.created', ins.id, ins.owner_id::text, "
        "src.event_head || ins.id::text || src.event_tail, ins.created_at "
        "FROM ins JOIN src ON src.id = ins.id, (SELECT COUNT(*) FROM locked) AS l "
        "ORDER BY ins.id RETURNING id, job_id), "
        "told AS (SELECT pg_notify(%s, '') FROM (SELECT 1 FROM ev LIMIT 1) AS one) "
        "SELECT ins.*, ev.id, src.n FROM ins JOIN src ON src.id = ins.id "
        "LEFT JOIN ev ON ev.job_id = ins.id, "
        "(SELECT COUNT(*) FROM woken) AS w, (SELECT COUNT(*) FROM told) AS t"
    )


_ONE = "(VALUES (" + ", ".join(f"%s::{t}" for _, t in _SOURCE) + "))"
# %b: arrays travel in binary, which psycopg dumps about ten times faster than as text.
_MANY = "unnest(" + ", ".join(f"%b::{t}[]" for _, t in _SOURCE) + ")"
INSERT_ONE = _insert_sql(_ONE)
INSERT_MANY = _insert_sql(_MANY)
INSERT_ONE_WITH_EVENT = _insert_with_events_sql(_ONE[:-2] + ", %s::text, %s::text, 1))")
INSERT_MANY_WITH_EVENTS = _insert_with_events_sql(
    _MANY[:-1] + ", %b::text[], %b::text[]) WITH ORDINALITY"
)


class PostgresStore(Store):
    vendor = "postgresql"
    insert_is_one_statement = True
    inserts_created_events = True

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        return "= ANY(%s)", [list(values)]

    def prepared_cursor(self) -> Any:
        # Server-side binding: the parameters travel apart from the SQL text, so each hot
        # statement has one text and PostgreSQL can prepare it (psycopg prepares a statement
        # after OPTIONS "prepare_threshold" runs; Django's default, None, never does). Django's
        # own cursors bind on the client, which also costs a literal per array element.
        db = self.connection
        db.close_if_health_check_failed()
        db.ensure_connection()
        with db.wrap_database_errors:
            cursor = ServerBindingCursor(db.connection)
            tz_loader = db.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
            if db.timezone != tz_loader.timezone:
                register_tzloader(db.timezone, cursor)
        db.validate_thread_sharing()
        return db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)

    def _insert_rows(self, rows: list[NewJob]) -> list[Job]:
        # One statement whatever the batch size, and it also wakes the engines' idle workers:
        # pg_notify is sent once per engine that got a row and delivered on commit only, so a
        # rolled-back enqueue wakes nobody. A batch travels as one array per column (unnest),
        # a single row as plain parameters; both statements keep one text and get prepared.
        # ON CONFLICT DO NOTHING skips rows whose key a live job holds (the partial unique
        # index); the caller reads those back.
        if rows[0].created_event is not None:
            return self._insert_rows_with_events(rows)
        if len(rows) == 1:
            sql, source = INSERT_ONE, _source_values(rows[0])
        else:
            sql = INSERT_MANY
            source = [list(column) for column in zip(*map(_source_values, rows), strict=True)]
        return self.jobs_from(sql, [rows[0].created_at, *source, CHANNEL])

    def _insert_rows_with_events(self, rows: list[NewJob]) -> list[Job]:
        if len(rows) == 1:
            head, tail = rows[0].created_event  # type: ignore[misc]
            sql, source = INSERT_ONE_WITH_EVENT, [*_source_values(rows[0]), head, tail]
        else:
            sql = INSERT_MANY_WITH_EVENTS
            source = [list(column) for column in zip(*map(_source_values, rows), strict=True)]
            parts = [r.created_event for r in rows]
            source += [[p[0] for p in parts], [p[1] for p in parts]]  # type: ignore[index]
        params = [*source, rows[0].created_at, CHANNEL, EVENTS_WRITE_LOCK, EVENTS_CHANNEL]
        jobs = self.jobs_from(sql, params, extra="_created_event")
        for job in jobs:
            event_id, n = job.__dict__["_created_event"]
            head, tail = rows[n - 1].created_event  # type: ignore[misc]
            owner = None if job.owner_id is None else str(job.owner_id)
            job.__dict__["_created_event"] = StoredEvent(
                event_id, "job.created", job.pk, owner, f"{head}{job.pk}{tail}"
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

    def claim(
        self,
        *,
        engine: str | None,
        worker_id: str,
        limit: int,
        now: datetime,
        leased_until: datetime,
        queues: list[str] | None = None,
        skip: ClaimSkip | None = None,
    ) -> list[Job]:
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
        jobs = self.jobs_from(
            f"WITH picked AS ({pick}) UPDATE {TABLE} AS j SET state = 'running', "
            "attempts = j.attempts + CASE WHEN j.state = 'queued' THEN 1 ELSE 0 END, "
            "worker_id = %s, leased_until = %s, started_at = %s, wake_requested = false "
            f"FROM picked WHERE j.id = picked.id RETURNING {RETURNING}",
            [*params, limit, worker_id, leased_until, now],
        )
        jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
        return jobs

    def _record_successes(self, outcomes: list[Outcome]) -> list[int]:
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
                "RETURNING j.id",
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
            return [row[0] for row in cursor.fetchall()]
