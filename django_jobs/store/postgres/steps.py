"""Durable steps' first attempts, inserted in one prepared statement per batch."""

from __future__ import annotations

from typing import Any

from ..base.columns import STEP_TABLE, TABLE
from ..base.requests import StepRow
from ..base.steps import StepsMixin

# A step's first attempt (``Store.insert_steps``), fenced per row: inserted only while the
# run that wrote it (worker id, attempt; NULL: no worker) still holds the job. "state || ''"
# as in _record_successes (outcomes.py): the job is looked up by its id. ``source`` gives the rows.
_INSERT_STEP = (
    f"INSERT INTO {STEP_TABLE} AS s (job_id, name, seq, key, state, attempts, started_at, "
    "value, error, ended_at) SELECT u.job_id, u.name, u.seq, u.key, u.state, 1, u.started_at, "
    "u.value::jsonb, u.error, u.ended_at FROM {source} "
    f"WHERE u.worker_id IS NULL OR EXISTS (SELECT 1 FROM {TABLE} AS j WHERE j.id = u.job_id "
    "AND j.worker_id = u.worker_id AND j.state || '' = 'running' AND j.attempts = u.attempt) "
    "RETURNING s.job_id, s.name, s.id"
)
_STEP_COLUMNS = (
    "job_id, name, seq, key, state, started_at, value, error, ended_at, worker_id, attempt"
)
_STEP_TYPES = (
    "bigint", "text", "int", "text", "text", "timestamptz", "text", "text", "timestamptz",
    "text", "int",
)  # fmt: skip
_ONE_STEP = f"(SELECT {', '.join(f'%s::{t}' for t in _STEP_TYPES)}) AS u({_STEP_COLUMNS})"
_STEP_ARRAYS = f"unnest({', '.join(f'%b::{t}[]' for t in _STEP_TYPES)}) AS u({_STEP_COLUMNS})"
_INSERT_ONE_STEP = _INSERT_STEP.format(source=_ONE_STEP)
_INSERT_STEPS = _INSERT_STEP.format(source=_STEP_ARRAYS)


def _step_values(row: StepRow, value: str | None) -> tuple[Any, ...]:
    """A step row's values in the order of ``_STEP_COLUMNS``, but the fence's two."""
    return (
        row.job_id,
        row.name,
        row.seq,
        row.key,
        row.state,
        row.started_at,
        value,
        row.error,
        row.ended_at,
    )


class PostgresSteps(StepsMixin):
    """A batch of steps' first attempts in one statement, each row with its own fence."""

    json_param = "%s::jsonb"

    def insert_steps(self, rows: list[StepRow]) -> list[int | None]:
        # Prepared statements, one text for one row and one for many (arrays in binary, %b),
        # so the step writer's group commit (engine/durable/step_writer.py) is one round trip. Each
        # row keeps its own fence: a row whose run lost its job is not inserted, the others
        # are. One row goes as plain parameters: psycopg's array dumpers cost about twice the
        # client CPU of scalars for a single row (measured: 190 against 95 us per statement),
        # and one row is what a worker's lone thread, or ``run_until_idle``, writes.
        with self.prepared_cursor() as cursor:
            if len(rows) == 1:
                [row] = rows
                worker_id, attempt = row.held or (None, None)
                cursor.execute(
                    _INSERT_ONE_STEP,
                    [*_step_values(row, self.js(row.value)), worker_id, attempt],
                )
                found = cursor.fetchall()
                return [found[0][2] if found else None]
            columns = zip(*(_step_values(row, self.js(row.value)) for row in rows), strict=True)
            cursor.execute(
                _INSERT_STEPS,
                [
                    *map(list, columns),
                    [r.held[0] if r.held else None for r in rows],
                    [r.held[1] if r.held else None for r in rows],
                ],
            )
            stored = {(job_id, name): step_id for job_id, name, step_id in cursor.fetchall()}
        return [stored.get((r.job_id, r.name)) for r in rows]
