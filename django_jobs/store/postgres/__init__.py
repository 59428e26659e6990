"""PostgreSQL: batch inserts with unnest, one-statement SKIP LOCKED claims, LISTEN/NOTIFY.

``PostgresStore`` is ``Store`` with PostgreSQL's statements where they differ, a mixin per
concern: ``cursors`` (prepared and planned server-side cursors), ``listen`` (NOTIFY and LISTEN),
``steps``, ``outcomes`` (the hot path's batches), ``maintenance`` (the prune), ``schedules``
(advisory locks) and ``events`` (event rows). The insert's statement is built in ``insert``,
from ids drawn ahead (``ids``); the claim and the insert itself are the class's own.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from ...models import Job
from ..base import Store
from ..base.columns import COLUMNS, TABLE
from ..base.new_job import NewJob
from ..base.requests import Claim
from ..event_rows import Inserted, MakeRow, StoredEvent
from ..staged_events import StagedRows, staging_table
from .cursors import SILENT_NETWORK_BOUNDS, ServerCursors
from .events import PostgresEventRows
from .ids import DRAW_IDS, JobIds, job_ids
from .insert import insert_statement
from .listen import CHANNEL, PostgresNotifications
from .maintenance import PostgresMaintenance
from .outcomes import PostgresOutcomes
from .schedules import PostgresSchedules
from .steps import PostgresSteps

RETURNING = ", ".join(f"j.{c}" for c in COLUMNS)


class PostgresStore(
    ServerCursors,
    PostgresNotifications,
    PostgresSteps,
    PostgresOutcomes,
    PostgresMaintenance,
    PostgresSchedules,
    PostgresEventRows,
    Store,
):
    """The store on PostgreSQL. Its insert is its own (not a mixin's): it takes ids from
    ``job_ids`` as this module names it, so that a ``JobIds`` put in its place here (a test's,
    with a clock of its own) is the one used."""

    vendor = "postgresql"
    insert_is_one_statement = True
    inserts_in_row_order = True

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        return "= ANY(%s)", [list(values)]

    def stages_created_events(self) -> bool:
        return staging_table.ready(self.alias)

    def _insert_rows(self, rows: list[NewJob], created: MakeRow | None) -> Inserted:
        # One statement whatever the batch size (see insert._insert_sql); each shape keeps one
        # text and gets prepared. ON CONFLICT DO NOTHING skips rows whose key a live job holds
        # (the partial unique index); the caller reads those back. The jobs are built from
        # the rows sent and their ids: reading every column back, and decoding it, costs more
        # than the insert.
        if created is None:
            sql, params = insert_statement(rows)
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
            drawn = [row[0] for row in self.fetchall(DRAW_IDS, [len(rows) + ahead])]
            ids, ahead = drawn[: len(rows)], 0
            job_ids.add(self.alias, drawn[len(rows) :])
        built = [row.inserted(job_id) for row, job_id in zip(rows, ids, strict=True)]
        jobs = Job.built(self.alias, built)
        events = [created(job) for job in jobs]
        # Inside the caller's transaction the rows are staged for its commit to store
        # (admission passes ``created`` there only when the staging table is ready).
        staged = self.connection.in_atomic_block
        sql, params = insert_statement(rows, (ids, events, ahead), staged=staged)
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

    # -- capabilities (see Store) ---------------------------------------------------------------

    supports_listen = True
    supports_skip_locked = True
    estimates_row_counts = True
    inserts_events_in_one_statement = True
    # NOTIFY wakes an idle worker at once: the poll is only the fallback for a lost one.
    poll_interval_default = 2.0
    worker_connection_options = SILENT_NETWORK_BOUNDS

    def estimated_rows(self, model: type[Model]) -> int | None:
        # pg_class.reltuples: kept fresh by autovacuum's ANALYZE; -1 when the table was never
        # vacuumed or analyzed (then the caller counts).
        rows = self.fetchall(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
            [self.connection.ops.quote_name(model._meta.db_table)],
        )
        return rows[0][0] if rows and rows[0][0] >= 0 else None

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


__all__ = ["CHANNEL", "JobIds", "PostgresStore", "job_ids"]
