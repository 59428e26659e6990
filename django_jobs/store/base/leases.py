"""What a worker's runs hold: the lease it extends, the cancels it reads, the progress it writes
while a job runs, and jobs it hands back unstarted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ... import clock
from ...models import worker_name
from ...states import AttemptOutcome
from .columns import TABLE
from .history import HistoryMixin, first_line


class LeasesMixin(HistoryMixin):
    """Statements on the running jobs of one worker, fenced by its worker id."""

    def hand_back(
        self,
        worker_id: str,
        job_ids: list[int],
        reason: str | None = None,
        *,
        pid: int | None = None,
    ) -> int:
        """Return claimed jobs as they were, attempt not used, at their place (``run_at``
        kept): unstarted ones (no run, no history), or (with the ``reason`` why, as their
        ``error``) started ones whose attempt was ended for no fault of theirs: their run's
        entry (``requeued``, run by process ``pid``) goes in their history."""
        if not job_ids:
            return 0
        id_sql, id_params = self.in_list(job_ids)
        error_sql, error_params = ("", [])
        if reason is not None:
            entry = self.row_entry_sql(
                worker_sql="CAST(%s AS text)",
                pid_sql="CAST(%s AS integer)",
                outcome=AttemptOutcome.REQUEUED,
            )
            error_sql = (
                ", error = %s, attempt_history = "
                f"{self.history_append_sql('attempt_history', entry)}"
            )
            line = first_line(reason)
            error_params = [
                reason,
                clock.now().isoformat(),
                worker_name(worker_id),
                pid,
                line,
                reason,
            ]
        return self.execute(
            f"UPDATE {TABLE} SET state = CASE WHEN wait_reason IS NULL THEN 'queued' "
            "ELSE 'waiting' END, attempts = CASE WHEN wait_reason IS NULL THEN attempts - 1 "
            "ELSE attempts END, worker_id = NULL, leased_until = NULL, started_at = NULL"
            f"{error_sql} WHERE id {id_sql} AND worker_id = %s AND state = 'running'",
            [*error_params, *id_params, worker_id],
        )

    def cancels_requested(self, worker_id: str) -> list[int]:
        """The ids of ``worker_id``'s running jobs whose cancel was requested: a read, as cheap
        as a heartbeat, for workers that cannot hear ``notify_cancel`` (no ``supports_listen``)."""
        return [
            row[0]
            for row in self.fetchall(
                f"SELECT id FROM {TABLE} WHERE worker_id = %s AND state = 'running' "
                "AND cancel_requested = %s",
                [worker_id, True],
            )
        ]

    def heartbeat(self, worker_id: str, leased_until: datetime) -> dict[int, bool]:
        """Extend the lease of ``worker_id``'s running jobs; return {id: cancel_requested}."""
        rows = self.fetchall(
            f"UPDATE {TABLE} SET leased_until = %s WHERE worker_id = %s AND state = 'running' "
            "RETURNING id, cancel_requested",
            [self.dt(leased_until), worker_id],
        )
        return {row[0]: bool(row[1]) for row in rows}

    def save_live(self, job_id: int, worker_id: str, progress: Any, log: list[str] | None) -> None:
        """Write coalesced progress and log lines of a running job."""
        self.execute(
            f"UPDATE {TABLE} SET progress = COALESCE(%s, progress), log = COALESCE(%s, log) "
            "WHERE id = %s AND worker_id = %s",
            [self.js(progress), self.js(log), job_id, worker_id],
        )

    def raise_attempt_limit(self, job_id: int, attempts: int) -> None:
        """Let a job take up to ``attempts`` attempts in all; never lowers its limit (a Celery
        task's ``self.retry(max_retries=N)`` above its own ``max_retries``)."""
        self.execute(
            f"UPDATE {TABLE} SET max_attempts = %s WHERE id = %s AND max_attempts < %s",
            [attempts, job_id, attempts],
        )
