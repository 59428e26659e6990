"""PostgreSQL: batch inserts with unnest, one-statement SKIP LOCKED claims, LISTEN/NOTIFY."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..models import Job
from .base import COLUMNS, TABLE, NewJob, Outcome, Store

CHANNEL = "django_jobs"
RETURNING = ", ".join(f"j.{c}" for c in COLUMNS)


class PostgresStore(Store):
    vendor = "postgresql"

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        return "= ANY(%s)", [list(values)]

    def _insert_rows(self, rows: list[NewJob]) -> list[Job]:
        # One statement per batch whatever its size: the rows travel as parallel arrays and
        # unnest() turns them back into rows. ON CONFLICT DO NOTHING skips rows whose key a
        # live job holds (the partial unique index); the caller reads those back.
        created_at = rows[0].created_at
        return self.raw_jobs(
            f"INSERT INTO {TABLE} AS j (kind, queue, engine, state, payload, owner_id, tenant, "
            "priority, attempts, max_attempts, log, idempotency_key, version, captured, "
            "cancel_requested, run_at, created_at, timestamps_derived) "
            "SELECT u.kind, u.queue, u.engine, 'queued', u.payload::jsonb, u.owner_id, "
            "u.tenant, u.priority, 0, u.max_attempts, '[]'::jsonb, u.key, u.version, "
            "u.captured::jsonb, false, u.run_at, %s, false "
            "FROM unnest(%s::varchar[], %s::varchar[], %s::varchar[], %s::text[], %s::bigint[], "
            "%s::varchar[], %s::smallint[], %s::int[], %s::varchar[], %s::varchar[], "
            "%s::text[], %s::timestamptz[]) "
            "AS u(kind, queue, engine, payload, owner_id, tenant, priority, max_attempts, key, "
            "version, captured, run_at) "
            f"ON CONFLICT DO NOTHING RETURNING {RETURNING}",
            [
                created_at,
                [r.kind for r in rows],
                [r.queue for r in rows],
                [r.engine for r in rows],
                [self.js(r.payload) for r in rows],
                [r.owner_id for r in rows],
                [r.tenant for r in rows],
                [r.priority for r in rows],
                [r.max_attempts for r in rows],
                [r.idempotency_key for r in rows],
                [r.version for r in rows],
                [self.js(r.captured) for r in rows],
                [r.run_at for r in rows],
            ],
        )

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
    ) -> list[Job]:
        # The CTE picks and locks the next due rows in claim order, skipping rows another
        # worker holds; the UPDATE marks them ours in the same statement. The CTE is also an
        # optimisation fence: the LIMIT applies before the update, on the partial claim index.
        filters, params = ["state IN ('queued', 'waiting')", "run_at <= %s"], [now]
        if engine is not None:
            filters.append("engine = %s")
            params.append(engine)
        if queues:
            filters.append("queue = ANY(%s)")
            params.append(list(queues))
        jobs = self.raw_jobs(
            "WITH picked AS ("
            f"  SELECT id FROM {TABLE} WHERE {' AND '.join(filters)}"
            "  ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
            f") UPDATE {TABLE} AS j SET state = 'running', "
            "attempts = j.attempts + CASE WHEN j.state = 'queued' THEN 1 ELSE 0 END, "
            "worker_id = %s, leased_until = %s, started_at = %s "
            f"FROM picked WHERE j.id = picked.id RETURNING {RETURNING}",
            [*params, limit, worker_id, leased_until, now],
        )
        jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
        return jobs

    def _record_successes(self, outcomes: list[Outcome]) -> list[int]:
        # The hot path: every success of a batch in one statement.
        rows = self.fetchall(
            f"UPDATE {TABLE} AS j SET state = 'succeeded', result = u.result::jsonb, "
            "error = NULL, started_at = u.started_at, ended_at = u.ended_at, "
            "wait_reason = NULL, progress = COALESCE(u.progress::jsonb, j.progress), "
            "log = COALESCE(u.log::jsonb, j.log), worker_id = NULL, leased_until = NULL "
            "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::timestamptz[], "
            "%s::text[], %s::text[]) AS u(id, result, started_at, ended_at, progress, log) "
            "WHERE j.id = u.id AND j.worker_id = %s AND j.state = 'running' RETURNING j.id",
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
        return [row[0] for row in rows]
