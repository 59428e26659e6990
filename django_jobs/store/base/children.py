"""Parents and children (``ctx.step.spawn``, gathers, workflows): the pending count a parent
waits on, adoption, a gather's reads, and the cancel of a tree."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from ...models import Job
from ...states import ENDED_STATES, LIVE_STATES
from .columns import COLUMNS, TABLE
from .new_job import reread
from .notifications import NotificationsMixin


class ChildrenMixin(NotificationsMixin):
    """A parent's children: counted, adopted, read, ended and cancelled."""

    def add_children(self, parent_id: int, count: int) -> None:
        """Count ``count`` more pending children on the parent (inside the spawn's transaction)."""
        self.execute(
            f"UPDATE {TABLE} SET children_pending = children_pending + %s, "
            "children_total = children_total + %s WHERE id = %s",
            [count, count, parent_id],
        )

    def adopt(self, parent_id: int, job_ids: list[int]) -> list[int]:
        """Make the live, parentless jobs among ``job_ids`` children of ``parent_id``; return
        their ids. (A deduped child: its end then wakes this parent, as a new child's would.)
        The parent itself is never adopted; a job keeps the first parent it had."""
        ids = [i for i in job_ids if i != parent_id]
        if not ids:
            return []
        id_sql, id_params = self.in_list(ids)
        state_sql, state_params = self.in_list(list(LIVE_STATES))
        return [
            row[0]
            for row in self.fetchall(
                f"UPDATE {TABLE} SET parent_id = %s WHERE id {id_sql} AND parent_id IS NULL "
                f"AND state {state_sql} RETURNING id",
                [parent_id, *id_params, *state_params],
            )
        ]

    def unended_parents(self, job_ids: list[int]) -> list[int | None]:
        """The parent id of each job of ``job_ids`` that has not ended (a gather's check).

        One placeholder for the ids on PostgreSQL (``in_list``): a Django ``pk__in`` of a
        gather's page of 1,000 ids is a query text psycopg is too long to cache, parsed anew on
        each call (6 ms of a chord's 1,000-member gather, ``python -m bench.fanout``)."""
        id_sql, id_params = self.in_list(job_ids)
        state_sql, state_params = self.in_list(list(ENDED_STATES))
        return [
            row[0]
            for row in self.fetchall(
                f"SELECT parent_id FROM {TABLE} WHERE id {id_sql} AND NOT (state {state_sql})",
                [*id_params, *state_params],
            )
        ]

    def outcomes_of(self, job_ids: list[int]) -> list[tuple[int, str, Any, str | None, Any]]:
        """``(id, state, result, error, trace_context)`` of each job of ``job_ids`` still
        stored, the JSON decoded (a gather's read; one placeholder as ``unended_parents``)."""
        id_sql, id_params = self.in_list(job_ids)
        return [
            (job_id, state, reread(result), error, reread(trace_context))
            for job_id, state, result, error, trace_context in self.fetchall(
                f"SELECT id, state, result, error, trace_context FROM {TABLE} WHERE id {id_sql}",
                id_params,
            )
        ]

    def children_ended(self, parents: list[int | None], now: datetime) -> None:
        """Children of these parents (one entry per child) ended: decrement each parent's
        pending count, and wake a parent that reaches zero as ``wake_jobs`` does (waiting: due
        now; running: re-asked as soon as it parks). Called in the transaction that records
        the ends: the row lock on a parent serializes two children ending at once, so exactly
        one of them sees zero. Nothing runs when no parent is given."""
        counts = Counter(p for p in parents if p is not None)
        if not counts:
            return
        engines = {engine for pending, engine in self._decrement(counts, now) if pending <= 0}
        if engines:
            self.notify(engines)

    def _decrement(self, counts: dict[int, int], now: datetime) -> list[tuple[int, str]]:
        """Decrement and wake (see ``children_ended``); return (pending, engine) per parent.
        Parents are updated in id order, so two batches never wait on each other in a cycle."""
        found = []
        for parent_id in sorted(counts):
            n = counts[parent_id]
            found += self.fetchall(
                f"UPDATE {TABLE} SET children_pending = children_pending - %s, "
                "run_at = CASE WHEN children_pending - %s <= 0 AND state = 'waiting' "
                "THEN %s ELSE run_at END, "
                "wake_requested = CASE WHEN children_pending - %s <= 0 AND state = 'running' "
                "THEN %s ELSE wake_requested END "
                "WHERE id = %s RETURNING children_pending, engine",
                [n, n, self.dt(now), n, True, parent_id],
            )
        return [(row[0], row[1]) for row in found]

    def cancel_children(self, parent_id: int, now: datetime) -> tuple[list[Job], list[int]]:
        """Cancel the children of ``parent_id`` that have not ended: at once, unless running
        (those get ``cancel_requested``, which their runner sees). Returns the jobs cancelled
        and the ids of those that are parents in turn (for the caller to go down the tree).
        Their ends count against the parent as any child's end does."""
        cancelled = self.jobs_from(
            f"UPDATE {TABLE} SET state = 'cancelled', ended_at = %s, wait_reason = NULL, "
            "cancel_requested = %s "
            "WHERE parent_id = %s AND state IN ('queued', 'waiting', 'blocked', 'unknown') "
            f"RETURNING {', '.join(COLUMNS)}",
            [self.dt(now), False, parent_id],
        )
        running = self.fetchall(
            f"UPDATE {TABLE} SET cancel_requested = %s WHERE parent_id = %s "
            "AND state = 'running' RETURNING id, children_total, worker_id",
            [True, parent_id],
        )
        self.notify_cancel([(r[2], r[0]) for r in running if r[2]])
        self.children_ended([parent_id] * len(cancelled), now)
        parents = [j.pk for j in cancelled if j.children_total] + [r[0] for r in running if r[1]]
        return cancelled, parents
