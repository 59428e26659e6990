"""Outcomes: a batch of ended (or parked) runs written in one transaction, each fenced by its
worker's lease, their ends counted against their parents."""

from __future__ import annotations

from django.db import transaction

from ... import clock
from ...states import ENDED_STATES, JobState
from .children import ChildrenMixin
from .columns import TABLE
from .history import HistoryMixin, entry_text
from .requests import Outcome

#: Outcomes after which the row keeps the id of the worker whose run it was: the job ended,
#: or stopped for a person (a job going back to the queue, or waiting, holds no worker).
KEEPS_WORKER = frozenset(
    (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.BLOCKED, JobState.UNKNOWN)
)


class OutcomesMixin(HistoryMixin, ChildrenMixin):
    """``record``; a dialect may write the successes of a batch its own way."""

    def record(self, outcomes: list[Outcome]) -> list[int]:
        """Write outcomes in one transaction; return the ids whose lease we still held. Each
        appends its run's entry to the job's ``attempt_history`` in the statement that
        writes it.

        The ended jobs that have a parent count against its pending children in the same
        transaction (``children_ended``): a batch without children costs nothing more.
        """
        if not outcomes:
            return []
        written: list[int] = []
        parents: list[int | None] = []
        with transaction.atomic(using=self.alias):
            # A success with a trace context to store (a traced child's, for its parent's
            # gather to link to) is written as the other outcomes are, with its context.
            successes = [
                o for o in outcomes if o.state == JobState.SUCCEEDED and o.trace_context is None
            ]
            if successes:
                for job_id, parent_id in self._record_successes(successes):
                    written.append(job_id)
                    parents.append(parent_id)
            for outcome in outcomes:
                if outcome.state == JobState.SUCCEEDED and outcome.trace_context is None:
                    continue
                held, parent_id = self._record_one(outcome)
                if held:
                    written.append(outcome.job_id)
                    if outcome.state in ENDED_STATES:
                        parents.append(parent_id)
            self.children_ended(parents, clock.now())
            for outcome in outcomes:
                if outcome.then is not None and outcome.job_id in written:
                    outcome.then()
        return written

    def _record_successes(self, outcomes: list[Outcome]) -> list[tuple[int, int | None]]:
        """Record succeeded outcomes; return (id, parent id) of each one written."""
        written = []
        for o in outcomes:
            held, parent_id = self._record_one(o)
            if held:
                written.append((o.job_id, parent_id))
        return written

    def _record_one(self, o: Outcome) -> tuple[bool, int | None]:
        """Record one outcome; return (lease still held, the job's parent id)."""
        ended = o.state in ENDED_STATES
        if o.state == JobState.WAITING:
            # A wake requested while the job ran (an emit matching its wait, or its last
            # child's end) re-asks it now; otherwise it sleeps until run_at (NULL: until woken).
            run_at_sql = "CASE WHEN wake_requested THEN %s ELSE %s END"
            run_at_params = [self.dt(o.ended_at), self.dt(o.run_at)]
        else:
            run_at_sql, run_at_params = "COALESCE(%s, run_at)", [self.dt(o.run_at)]
        # Traced: the attempt's span context goes with the outcome (the statement is the
        # untraced one otherwise, and writes nothing more).
        traced = o.trace_context is not None
        rows = self.fetchall(
            f"UPDATE {TABLE} SET state = %s, result = %s, error = %s, started_at = %s, "
            "first_started_at = COALESCE(first_started_at, %s), "
            f"ended_at = %s, run_at = {run_at_sql}, wait_reason = %s, "
            "progress = COALESCE(%s, progress), log = COALESCE(%s, log), "
            "worker_id = %s, leased_until = NULL, "
            "cancel_requested = COALESCE(%s, cancel_requested), wake_requested = false, "
            f"attempt_history = {self.history_append_sql('attempt_history', '%s')}"
            f"{', trace_context = %s' if traced else ''} "
            "WHERE id = %s AND worker_id = %s AND state = 'running' RETURNING parent_id",
            [
                o.state,
                self.js(o.result),
                o.error,
                self.dt(o.started_at),
                self.dt(o.started_at),
                self.dt(o.ended_at if ended else None),
                *run_at_params,
                o.wait_reason,
                self.js(o.progress),
                self.js(o.log),
                o.worker_id if o.state in KEEPS_WORKER else None,
                # An end clears the request; a job that goes on (a retry, a wait) keeps it,
                # and its next run ends ``cancelled`` before the runner starts.
                False if ended else None,
                entry_text(o),
                *([self.js(o.trace_context)] if traced else []),
                o.job_id,
                o.worker_id,
            ],
        )
        return (True, rows[0][0]) if rows else (False, None)
