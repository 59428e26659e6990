"""The job table's names and columns, as the stores' statements write them."""

from __future__ import annotations

from ...models import Job, JobStep, PrunedCount

TABLE = Job._meta.db_table
STEP_TABLE = JobStep._meta.db_table
PRUNED_TABLE = PrunedCount._meta.db_table
# A row's state as the prune tests it on rows given by id: "state || ''" keeps the planner off
# the indexes on state, which on stale statistics it may pick over the primary key, reading
# every ended row of the table for each batch (measured on PostgreSQL: 1.9 s for a batch of
# 2,000 among 100,000 ended rows, against milliseconds by id).
ENDED = "state || ''"
# A concrete field always has a column (the stubs type it ``str | None``).
COLUMNS: list[str] = [f.column for f in Job._meta.concrete_fields]  # type: ignore[misc]
SELECT_COLUMNS = ", ".join(f"{TABLE}.{c}" for c in COLUMNS)
FIELD_NAMES = [f.attname for f in Job._meta.concrete_fields]
