"""A paginator that does not count every row of a big, unfiltered job table.

``COUNT(*)`` reads the whole table on PostgreSQL (it keeps no row count), which takes seconds
with millions of ended jobs: every visit to the admin's unfiltered job list would pay it.
Above ``EXACT_COUNT_BELOW`` rows, by the planner's own estimate, the unfiltered list shows
that estimate instead (kept fresh by autovacuum's ANALYZE). A filtered list is counted
exactly: its filters run on indexes, and its count is what the operator asked for.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

#: Tables estimated below this many rows are counted exactly.
EXACT_COUNT_BELOW = 100_000


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """The planner's estimate of the rows of ``queryset``'s table (PostgreSQL), else None."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
            [connection.ops.quote_name(queryset.model._meta.db_table)],
        )
        row = cursor.fetchone()
    # -1: never vacuumed or analyzed; count exactly.
    return row[0] if row is not None and row[0] >= 0 else None


class EstimatedCountPaginator(Paginator):
    """``count`` is the planner's estimate for a big table listed without a filter."""

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if isinstance(queryset, QuerySet) and not queryset.query.where:
            estimate = estimated_rows(queryset)
            if estimate is not None and estimate >= EXACT_COUNT_BELOW:
                return estimate
        return super().count
