"""What operators' actions and views ask of the store: a job locked for an action, wake-ups of
waiting jobs, due counts, a table's estimated size, a parent's children locked."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Model

from ...models import Job
from .columns import TABLE
from .notifications import NotificationsMixin


class OperatorsMixin(NotificationsMixin):
    """Operator actions and reads (``operations``, the admin, the API, the CLI)."""

    def locked(self, job_id: int) -> Job:
        """The job row, locked for update until the surrounding transaction ends."""
        return Job.objects.using(self.alias).select_for_update().get(pk=job_id)

    def wake_jobs(self, job_ids: list[int], now: datetime) -> None:
        """Re-ask these jobs now: waiting ones at once, running ones as soon as they park."""
        id_sql, id_params = self.in_list(job_ids)
        self.execute(
            f"UPDATE {TABLE} SET run_at = %s WHERE id {id_sql} AND state = 'waiting'",
            [self.dt(now), *id_params],
        )
        self.execute(
            f"UPDATE {TABLE} SET wake_requested = %s WHERE id {id_sql} AND state = 'running'",
            [True, *id_params],
        )
        engines = {
            row[0]
            for row in self.fetchall(
                f"SELECT DISTINCT engine FROM {TABLE} WHERE id {id_sql}", id_params
            )
        }
        self.notify(engines)

    def wake_waiting(self, now: datetime) -> int:
        return self.execute(
            f"UPDATE {TABLE} SET run_at = %s WHERE state = 'waiting'", [self.dt(now)]
        )

    def count_due(self, *, engine: str | None, now: datetime) -> int:
        engine_sql, params = ("", []) if engine is None else (" AND engine = %s", [engine])
        return self.fetchall(
            f"SELECT COUNT(*) FROM {TABLE} WHERE state IN ('queued', 'waiting') "
            f"AND run_at <= %s{engine_sql}",
            [self.dt(now), *params],
        )[0][0]

    def estimated_rows(self, model: type[Model]) -> int | None:
        """The planner's estimate of the rows of ``model``'s table, or None when the store
        has none (``estimates_row_counts``) or the table was never analyzed."""
        return None

    def locked_children(self, parent_id: int, states: list[str]) -> list[Job]:
        """The children of ``parent_id`` in ``states``, in id order, locked for update until
        the surrounding transaction ends."""
        return list(
            Job.objects.using(self.alias)
            .select_for_update()
            .filter(parent_id=parent_id, state__in=states)
            .order_by("id")
        )
