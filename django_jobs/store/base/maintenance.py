"""Maintenance: the rescue of jobs whose worker died, the end of expired ones, and retention's
locked, tallied deletes of ended jobs."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Q

from ...models import Job
from ...states import ENDED_STATES, EXPIRED_ERROR, AttemptOutcome, JobState
from .children import ChildrenMixin
from .columns import COLUMNS, ENDED, PRUNED_TABLE, STEP_TABLE, TABLE
from .history import HistoryMixin, first_line


class MaintenanceMixin(HistoryMixin, ChildrenMixin):
    """What the maintenance loop and the retention run; an end counts against its parent."""

    def rescue(self, *, engine: str | None, now: datetime, error: str) -> list[tuple[int, str]]:
        """Re-ask running jobs whose lease ran out (their worker died).

        A job with attempts left goes back to ``queued`` now; one without fails, and, as any
        end, counts against its parent's pending children in the same transaction. Each
        attempt's entry (``lost``, no process id known) goes in its job's history.

        A row another transaction holds is passed over where the store can
        (``supports_skip_locked``), and looked at again on the next rescue: its holder may be
        recording that job's outcome now, or be a worker cut off from the server, whose
        transaction stays open there until the server notices. Waiting on it would hold the
        calling worker's keeper thread, and every outcome behind it, for as long.
        """
        engine_sql, params = ("", []) if engine is None else (" AND engine = %s", [engine])
        skip_locked = " FOR UPDATE SKIP LOCKED" if self.supports_skip_locked else ""
        entry = self.row_entry_sql(
            worker_sql=self.worker_name_sql("worker_id"),
            pid_sql="NULL",
            outcome=AttemptOutcome.LOST,
        )
        with transaction.atomic(using=self.alias):
            rows = self.fetchall(
                f"UPDATE {TABLE} SET "
                "state = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END, "
                "ended_at = CASE WHEN attempts >= max_attempts THEN %s ELSE NULL END, "
                "error = %s, run_at = %s, worker_id = NULL, leased_until = NULL, "
                "wait_reason = NULL, "
                f"attempt_history = {self.history_append_sql('attempt_history', entry)} "
                f"WHERE id IN (SELECT id FROM {TABLE} WHERE state = 'running' "
                f"AND leased_until < %s{engine_sql}{skip_locked}) AND state = 'running' "
                "RETURNING id, state, parent_id",
                [
                    self.dt(now),
                    error,
                    self.dt(now),
                    now.isoformat(),
                    first_line(error),
                    error,
                    self.dt(now),
                    *params,
                ],
            )
            self.children_ended([row[2] for row in rows if row[1] == JobState.FAILED], now)
        return [(row[0], row[1]) for row in rows]

    def end_expired(self, now: datetime, limit: int) -> list[Job]:
        """End up to ``limit`` queued jobs that never started and whose ``expires_at`` has
        passed: ``cancelled`` with the error "expired", which also frees their idempotency
        keys (an ended job holds none). Their ends count against their parents as any
        child's end does. A job a claim holds is ``running`` by then and is passed over."""
        with transaction.atomic(using=self.alias):
            expired = self.jobs_from(
                f"UPDATE {TABLE} SET state = '{JobState.CANCELLED.value}', error = %s, "
                "ended_at = %s, wait_reason = NULL "
                f"WHERE id IN (SELECT id FROM {TABLE} WHERE state = '{JobState.QUEUED.value}' "
                "AND expires_at IS NOT NULL AND expires_at <= %s AND attempts = 0 "
                "ORDER BY expires_at LIMIT %s) "
                f"AND state = '{JobState.QUEUED.value}' AND attempts = 0 "
                f"AND expires_at <= %s RETURNING {', '.join(COLUMNS)}",
                [EXPIRED_ERROR, self.dt(now), self.dt(now), limit, self.dt(now)],
            )
            self.children_ended([job.parent_id for job in expired], now)
        return expired

    # -- retention ----------------------------------------------------------------------------

    def lock_jobs(self, condition: Q, limit: int) -> list[int]:
        """The ids of up to ``limit`` jobs matching ``condition``, locked until the surrounding
        transaction ends. Rows another transaction holds are passed over where the database
        can (``supports_skip_locked``): a prune never waits on a ``retry()`` in progress."""
        return list(
            Job.objects.using(self.alias)
            .filter(condition)
            .order_by()
            .select_for_update(skip_locked=self.supports_skip_locked)
            .values_list("pk", flat=True)[:limit]
        )

    def tally_pruned(self, job_ids: list[int]) -> None:
        """Add the ended jobs among ``job_ids`` to the pruned tally (``PrunedCount``), per kind
        and state, in one statement. Call it in the transaction that deletes them."""
        if not job_ids:
            return
        id_sql, id_params = self.in_list(job_ids)
        ended_sql, ended_params = self.in_list(list(ENDED_STATES))
        self.execute(
            f"INSERT INTO {PRUNED_TABLE} (kind, state, count) "
            f"SELECT kind, state, COUNT(*) FROM {TABLE} WHERE id {id_sql} AND {ENDED} {ended_sql} "
            "GROUP BY kind, state ON CONFLICT (kind, state) "
            f"DO UPDATE SET count = {PRUNED_TABLE}.count + excluded.count",
            [*id_params, *ended_params],
        )

    def prune_jobs(self, job_ids: list[int]) -> tuple[int, int]:
        """Delete the ended jobs among ``job_ids`` with their steps; return (jobs, steps).

        Their children lose the link to them (the ``SET_NULL`` of ``Job.parent``) and they
        count in the pruned tally, in the same transaction. A live job among the ids is left
        alone. Plain SQL, no row loaded: the caller has checked that nothing but steps and
        children refers to a job and that no deletion signal listens.
        """
        if not job_ids:
            return 0, 0
        id_sql, id_params = self.in_list(job_ids)
        ended_sql, ended_params = self.in_list(list(ENDED_STATES))
        gone = f"SELECT id FROM {TABLE} WHERE id {id_sql} AND {ENDED} {ended_sql}"
        with transaction.atomic(using=self.alias):
            self.tally_pruned(job_ids)
            steps = self.execute(
                f"DELETE FROM {STEP_TABLE} WHERE job_id IN ({gone})", [*id_params, *ended_params]
            )
            self.execute(
                f"UPDATE {TABLE} SET parent_id = NULL WHERE parent_id IN ({gone}) "
                f"AND id NOT IN ({gone})",
                [*id_params, *ended_params, *id_params, *ended_params],
            )
            jobs = self.execute(
                f"DELETE FROM {TABLE} WHERE id {id_sql} AND {ENDED} {ended_sql}",
                [*id_params, *ended_params],
            )
        return jobs, steps
