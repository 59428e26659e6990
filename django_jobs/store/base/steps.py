"""Durable steps' rows: inserted and updated only while the run that writes them holds the job."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ...models import JobStep
from .columns import STEP_TABLE, TABLE
from .core import StoreCore
from .requests import StepRow


class StepsMixin(StoreCore):
    """A step's rows, fenced by the run that writes them.

    A step's writes land only while the run that makes them still holds the job (``held``:
    its worker id and attempt; None for a run no worker holds): a run that lost its lease
    cannot write over what the run after it stored. Plain SQL, one statement each: built
    through the ORM (a filter across the job relation) the fenced update cost a millisecond
    of the worker's CPU to compile, per step write, more than the database spent on it.
    """

    # A JSON parameter where its column's type cannot be inferred (an INSERT's SELECT list).
    json_param = "%s"

    def _held_sql(self, job_id: int, held: tuple[str, int] | None) -> tuple[str, list[Any]]:
        if held is None:
            return "", []
        return (
            f"EXISTS (SELECT 1 FROM {TABLE} WHERE id = %s AND worker_id = %s "
            "AND state = 'running' AND attempts = %s)",
            [job_id, *held],
        )

    def job_held(self, job_id: int, held: tuple[str, int]) -> bool:
        """Does the run ``held`` (worker id, attempt) still hold job ``job_id``?"""
        sql, params = self._held_sql(job_id, held)
        return bool(self.fetchall(f"SELECT {sql}", params)[0][0])

    def insert_steps(self, rows: list[StepRow]) -> list[int | None]:
        """Insert ``rows`` in one transaction (their commit: one, in autocommit); return each
        row's id, or None for a row whose run no longer holds its job (it is not written, the
        others are). Any error writes none of them."""
        if len(rows) == 1:
            return [self._insert_step(rows[0])]
        with transaction.atomic(using=self.alias):
            return [self._insert_step(row) for row in rows]

    def _insert_step(self, row: StepRow) -> int | None:
        fence, fence_params = self._held_sql(row.job_id, row.held)
        found = self.fetchall(
            f"INSERT INTO {STEP_TABLE} (job_id, name, seq, key, state, attempts, started_at, "
            f"value, error, ended_at) SELECT %s, %s, %s, %s, %s, 1, %s, {self.json_param}, %s, "
            f"%s{' WHERE ' + fence if fence else ''} RETURNING id",
            [
                row.job_id,
                row.name,
                row.seq,
                row.key,
                row.state,
                self.dt(row.started_at),
                self.js(row.value),
                row.error,
                self.dt(row.ended_at),
                *fence_params,
            ],
        )
        return found[0][0] if found else None

    def update_step(
        self, step_id: int, values: dict[str, Any], *, job_id: int, held: tuple[str, int] | None
    ) -> bool:
        """Write ``values`` (columns of the step: state, value, error, attempts, started_at,
        ended_at) to step ``step_id``; False when ``held`` no longer holds the job."""
        sets, params = [], []
        for column, value in values.items():
            sets.append(f"{column} = %s")
            if column == "value":
                params.append(self.js(value))
            elif column in ("started_at", "ended_at"):
                params.append(self.dt(value))
            else:
                params.append(value)
        fence, fence_params = self._held_sql(job_id, held)
        return (
            self.execute(
                f"UPDATE {STEP_TABLE} SET {', '.join(sets)} WHERE id = %s"
                f"{' AND ' + fence if fence else ''}",
                [*params, step_id, *fence_params],
            )
            == 1
        )

    def locked_step(self, step_id: int) -> JobStep:
        """The step row, read afresh and locked for update until the transaction ends."""
        return JobStep.objects.using(self.alias).select_for_update().get(pk=step_id)
