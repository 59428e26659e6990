"""SQLite: the embedded single-writer store.

SQLite runs one writer at a time, so a claim is a single ``UPDATE ... WHERE id IN (SELECT ...
LIMIT n) RETURNING``: the statement takes the write lock before it reads, and no other worker
can pick the same row between the read and the write.
"""

from __future__ import annotations

from typing import Any

from ..models import Job, Schedule
from .base import Store
from .base.columns import COLUMNS, TABLE
from .base.new_job import INSERT_COLUMNS, NewJob, insert_sql
from .base.requests import Claim
from .event_rows import Inserted, MakeRow

RETURNING = ", ".join(COLUMNS)
# The INSERT's columns and one row's values, from the one list of a new job's columns.
_NAMES, _VALUES = insert_sql(["%s"] * len(INSERT_COLUMNS), booleans=("0", "1"))
_ROW = f"({_VALUES})"
_INSERT = f"INSERT INTO {TABLE} ({_NAMES}) VALUES {{}} ON CONFLICT DO NOTHING RETURNING {RETURNING}"
SCHEDULE_TABLE = Schedule._meta.db_table
# SQLite allows 32,766 bound variables per statement; a row takes one per column.
_INSERT_CHUNK = 1000


class SQLiteStore(Store):
    vendor = "sqlite"

    def lock_owner(self, owner_id: Any) -> None:
        # One writer at a time: a write that changes nothing takes the database's write lock,
        # waiting for it (the connection's timeout) as the transaction's first statement does.
        # With transaction_mode "IMMEDIATE" (docs/getting-started.md) the BEGIN has taken it
        # already; without, this one keeps a count read next from going stale before the
        # insert (which would fail "database is locked" rather than wait).
        self.execute(f"UPDATE {SCHEDULE_TABLE} SET id = id WHERE 0")

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        if not values:
            return "IN (NULL)", []
        return f"IN ({', '.join(['%s'] * len(values))})", list(values)

    def _insert_rows(self, rows: list[NewJob], created: MakeRow | None) -> Inserted:
        # The jobs, then their job.created rows in the same transaction (the caller's: SQLite
        # runs one writer at a time, so the events' ids follow the commits anyway).
        adapt = [self.dt if c.is_instant else None for c in INSERT_COLUMNS]
        values = [(c.value, to_db) for c, to_db in zip(INSERT_COLUMNS, adapt, strict=True)]
        jobs: list[Job] = []
        for start in range(0, len(rows), _INSERT_CHUNK):
            chunk = rows[start : start + _INSERT_CHUNK]
            params: list[Any] = []
            for row in chunk:
                for value, to_db in values:
                    params.append(value(row) if to_db is None else to_db(value(row)))
            jobs += self.raw_jobs(_INSERT.format(", ".join([_ROW] * len(chunk))), params)
        if created is None or not jobs:
            return jobs, []
        # In job id order, as on PostgreSQL (RETURNING gives the rows in no set order).
        ordered = sorted(jobs, key=lambda job: job.pk)
        return jobs, self.insert_events([created(job) for job in ordered])

    def claim_statement(self, request: Claim) -> tuple[str, list[Any]]:
        where, params = self.claim_filters(request)
        pick = (
            self.fair_pick_sql(where)
            if request.skip is not None and request.skip.fair
            else f"SELECT id FROM {TABLE} WHERE {where} ORDER BY priority, run_at, id LIMIT %s"
        )
        return (
            f"UPDATE {TABLE} SET state = 'running', "
            "attempts = attempts + CASE WHEN state = 'queued' THEN 1 ELSE 0 END, "
            "worker_id = %s, leased_until = %s, started_at = %s, wake_requested = false "
            f"WHERE id IN ({pick}) RETURNING {RETURNING}",
            [
                request.worker_id,
                self.dt(request.leased_until),
                self.dt(request.now),
                *params,
                request.limit,
            ],
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
