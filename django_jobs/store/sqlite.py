"""SQLite: the embedded single-writer store.

SQLite runs one writer at a time, so a claim is a single ``UPDATE ... WHERE id IN (SELECT ...
LIMIT n) RETURNING``: the statement takes the write lock before it reads, and no other worker
can pick the same row between the read and the write.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..models import Job
from .base import COLUMNS, TABLE, ClaimSkip, NewJob, Store

# SQLite allows 32,766 bound variables per statement; 14 per row.
_INSERT_CHUNK = 1000
RETURNING = ", ".join(COLUMNS)
# One row's VALUES, in the order of the INSERT's column list.
_ROW = "(%s, %s, %s, 'queued', %s, %s, %s, %s, 0, %s, '[]', %s, %s, %s, 0, 0, %s, %s, 0, %s, 0, 0)"


class SQLiteStore(Store):
    vendor = "sqlite"

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        if not values:
            return "IN (NULL)", []
        return f"IN ({', '.join(['%s'] * len(values))})", list(values)

    def _insert_rows(self, rows: list[NewJob]) -> list[Job]:
        jobs: list[Job] = []
        for start in range(0, len(rows), _INSERT_CHUNK):
            chunk = rows[start : start + _INSERT_CHUNK]
            values = ", ".join([_ROW] * len(chunk))
            params: list[Any] = []
            for r in chunk:
                params += [
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
                    self.dt(r.run_at),
                    self.dt(r.created_at),
                    r.parent_id,
                ]
            jobs += self.raw_jobs(
                f"INSERT INTO {TABLE} (kind, queue, engine, state, payload, owner_id, tenant, "
                "priority, attempts, max_attempts, log, idempotency_key, version, captured, "
                "cancel_requested, wake_requested, run_at, created_at, timestamps_derived, "
                "parent_id, children_pending, children_total) "
                f"VALUES {values} ON CONFLICT DO NOTHING RETURNING {RETURNING}",
                params,
            )
        return jobs

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
        where, params = self.claim_filters(engine=engine, now=now, queues=queues, skip=skip)
        pick = (
            self.fair_pick_sql(where)
            if skip is not None and skip.fair
            else f"SELECT id FROM {TABLE} WHERE {where} ORDER BY priority, run_at, id LIMIT %s"
        )
        return (
            f"UPDATE {TABLE} SET state = 'running', "
            "attempts = attempts + CASE WHEN state = 'queued' THEN 1 ELSE 0 END, "
            "worker_id = %s, leased_until = %s, started_at = %s, wake_requested = false "
            f"WHERE id IN ({pick}) RETURNING {RETURNING}",
            [worker_id, self.dt(leased_until), self.dt(now), *params, limit],
        )

    explain_prefix = "EXPLAIN QUERY PLAN "

    def explain(self, sql: str, params: list[Any]) -> list[str]:
        # Rows of (id, parent, notused, detail): the detail indented under its parent.
        depth: dict[int, int] = {0: -1}
        lines = []
        for node, parent, _, detail in self.fetchall(self.explain_prefix + sql, params):
            depth[node] = depth.get(parent, -1) + 1
            lines.append("  " * depth[node] + str(detail))
        return lines
