"""The hot path's batches: every success of a batch in one statement, and every parent's
pending count in one."""

from __future__ import annotations

from datetime import datetime

from ...models import worker_name
from ...states import AttemptOutcome
from ..base.columns import TABLE
from ..base.outcomes import OutcomesMixin
from ..base.requests import Outcome
from .history import PostgresHistory

#: A success's history entry (``store.base.history.entry``), made by the statement from what it
#: writes: no JSON text per job to build and send. One batch is one worker process's.
_ENTRY = (
    "jsonb_build_object('attempt', j.attempts, 'started_at', u.started_at, "
    "'ended_at', u.ended_at, 'worker', %s::text, 'pid', %s::int, "
    f"'outcome', '{AttemptOutcome.SUCCEEDED.value}', "
    "'error', NULL, 'traceback', NULL)"
)


class PostgresOutcomes(PostgresHistory, OutcomesMixin):
    """Successes and parents' decrements as arrays in binary, one prepared statement each."""

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
                "cancel_requested = false, "
                f"attempt_history = {self.history_append_sql('j.attempt_history', _ENTRY)} "
                "FROM unnest(%b::bigint[], %b::text[], %b::timestamptz[], %b::timestamptz[], "
                "%b::text[], %b::text[]) AS u(id, result, started_at, ended_at, progress, log) "
                "WHERE j.id = u.id AND j.worker_id = %s AND j.state || '' = 'running' "
                "RETURNING j.id, j.parent_id",
                [
                    # The entry's worker and process (in SET, before the arrays).
                    worker_name(outcomes[0].worker_id),
                    outcomes[0].pid,
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
