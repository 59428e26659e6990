"""The history of attempts on PostgreSQL: jsonb concatenation."""

from __future__ import annotations

from ..base.history import HISTORY_KEPT, HistoryMixin


class PostgresHistory(HistoryMixin):
    json_object_function = "jsonb_build_object"

    def history_append_sql(self, column: str, entry_sql: str) -> str:
        # "- 0" drops the oldest entry (the first) of a full history.
        return (
            f"(CASE WHEN jsonb_array_length({column}) < {HISTORY_KEPT} THEN {column} "
            f"ELSE {column} - 0 END) || jsonb_build_array(({entry_sql})::jsonb)"
        )

    def worker_name_sql(self, column: str) -> str:
        return f"regexp_replace({column}, ':[^:]*:[^:]*$', '')"
