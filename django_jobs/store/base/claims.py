"""Claiming: the due jobs a worker may take, the one statement that takes them (and its plan),
and what the limits count before a claim (running jobs, recent starts)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...models import Job
from .columns import TABLE
from .core import StoreCore
from .requests import Claim


class ClaimsMixin(StoreCore):
    """A claim's filters and statement; each dialect writes the statement (``claim_statement``)."""

    def claim_filters(self, request: Claim) -> tuple[str, list[Any]]:
        """The WHERE clause of "due jobs this worker may claim", and its parameters."""
        # A job that never started is not claimed past its ``expires_at`` (maintenance ends
        # it, ``end_expired``); the column is read on the rows the claim index yields anyway.
        filters = [
            "state IN ('queued', 'waiting')",
            "run_at <= %s",
            "(expires_at IS NULL OR attempts > 0 OR expires_at > %s)",
        ]
        params: list[Any] = [self.dt(request.now), self.dt(request.now)]
        if request.engine is not None:
            filters.append("engine = %s")
            params.append(request.engine)
        if request.queues:
            queue_sql, queue_params = self.in_list(list(request.queues))
            filters.append(f"queue {queue_sql}")
            params += queue_params
        skip = request.skip
        if skip is not None:
            for column, values in (("queue", skip.queues), ("kind", skip.kinds)):
                if values:
                    sql, more = self.in_list(list(values))
                    filters.append(f"NOT ({column} {sql})")
                    params += more
            if skip.tenants:
                sql, more = self.in_list(list(skip.tenants))
                filters.append(f"(tenant IS NULL OR NOT (tenant {sql}))")
                params += more
            for engine, queue in skip.paused:
                filters.append("NOT (engine = %s AND queue = %s)")
                params += [engine, queue]
        return " AND ".join(filters), params

    def fair_pick_sql(self, where: str) -> str:
        """Ids of due jobs, round-robin across tenants, in claim order within each turn."""
        return (
            "SELECT id FROM (SELECT id, priority, run_at, ROW_NUMBER() OVER ("
            "PARTITION BY COALESCE(tenant, '') ORDER BY priority, run_at, id) AS turn "
            f"FROM {TABLE} WHERE {where}) AS due ORDER BY turn, priority, run_at, id LIMIT %s"
        )

    def running_counts(self) -> tuple[int, dict[str, int], dict[str, int]]:
        """Running jobs: in all, per queue, per tenant (every engine: caps are global)."""
        rows = self.fetchall(
            f"SELECT queue, tenant, COUNT(*) FROM {TABLE} WHERE state = 'running' "
            "GROUP BY queue, tenant"
        )
        total = 0
        per_queue: dict[str, int] = {}
        per_tenant: dict[str, int] = {}
        for queue, tenant, count in rows:
            total += count
            per_queue[queue] = per_queue.get(queue, 0) + count
            if tenant is not None:
                per_tenant[tenant] = per_tenant.get(tenant, 0) + count
        return total, per_queue, per_tenant

    def started_since(self, column: str, values: list[str], since: datetime) -> dict[str, int]:
        """Jobs started after ``since`` (a window (since, now]), per ``kind`` or per ``queue``."""
        assert column in ("kind", "queue")
        sql, params = self.in_list(list(values))
        rows = self.fetchall(
            f"SELECT {column}, COUNT(*) FROM {TABLE} WHERE {column} {sql} AND started_at > %s "
            f"GROUP BY {column}",
            [*params, self.dt(since)],
        )
        return {row[0]: row[1] for row in rows}

    def claim(self, request: Claim) -> list[Job]:
        """Mark up to ``request.limit`` due jobs ``running`` for its worker and return them.

        A ``queued`` job starts a new attempt (``attempts + 1``); a ``waiting`` job being
        re-asked keeps its attempt. Jobs come back in claim order: priority, run_at, id.
        The statement is ``claim_statement``'s, so what ``explain`` shows is what runs, and
        it is planned on every execution (``planned_cursor``): the table it reads changes
        more than any other.
        """
        jobs = self.jobs_from(*self.claim_statement(request), planned=True)
        jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
        return jobs

    def claim_statement(self, request: Claim) -> tuple[str, list[Any]]:
        """The one statement ``claim`` runs for ``request``, and its parameters."""
        raise NotImplementedError

    # EXPLAIN without ANALYZE: the database plans the statement and runs none of it.
    explain_prefix = "EXPLAIN "

    def explain(self, sql: str, params: list[Any]) -> list[str]:
        """The database's plan for ``sql``, one line per row of its EXPLAIN."""
        return [str(row[0]) for row in self.fetchall(self.explain_prefix + sql, params)]
