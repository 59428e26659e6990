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
from django.db.models import QuerySet
from django.utils.functional import cached_property

from ..store import get_store

#: Tables estimated below this many rows are counted exactly.
EXACT_COUNT_BELOW = 100_000


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """The store's estimate of the rows of ``queryset``'s table, or None when it has none
    (``Store.estimates_row_counts``: PostgreSQL's planner statistics) or the table was never
    analyzed."""
    store = get_store(queryset.db)
    if not store.estimates_row_counts:
        return None
    return store.estimated_rows(queryset.model)


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
