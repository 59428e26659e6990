"""What to tell an operator when the database refuses a statement of the worker's."""

from __future__ import annotations

#: SQLSTATEs of a prepared statement that is already there or missing: a server connection
#: shared by clients that each prepare (PgBouncer's transaction mode before 1.21).
_PREPARED_STATEMENT_STATES = ("42P05", "26000")


def database_hint(exc: BaseException) -> str:
    """What to check: reconnecting does not cure a pooler that mixes prepared statements."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or getattr(exc, "sqlstate", None)
    if sqlstate in _PREPARED_STATEMENT_STATES:
        return (
            "The server connection is shared with other clients (PgBouncer in transaction "
            "mode?): set DISABLE_SERVER_SIDE_CURSORS = True on the database, or use session "
            "mode or PgBouncer 1.21+ with max_prepared_statements > 0 (docs/scaling.md)."
        )
    return "Check that it is up and takes writes (disk space, read-only mode)."
