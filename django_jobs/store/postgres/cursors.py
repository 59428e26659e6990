"""The engine's cursors on PostgreSQL (server-side binding: prepared for its hot statements,
planned afresh for the claim) and the connection options that bound a silent network."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.base import TIMESTAMPTZ_OID, ServerBindingCursor
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

from ..base.core import StoreCore

#: A psycopg prepare_threshold no statement reaches by count: only the engine's own statements,
#: which ask for it, are prepared (Django's client-side-binding cursors never are).
NEVER_BY_COUNT = 2**31 - 1


def engine_prepares(settings_dict: dict[str, Any]) -> bool:
    """May the engine prepare its hot statements on this database?

    Yes, unless the settings say prepared statements must not be used: an explicit
    ``OPTIONS["prepare_threshold"] = None``, or ``DISABLE_SERVER_SIDE_CURSORS`` (what Django
    asks of a site behind PgBouncer in transaction mode, where a statement prepared on one
    server connection is missing on the next before PgBouncer 1.21; from 1.21 on,
    ``max_prepared_statements`` > 0 makes them safe). A numeric threshold is the user's own
    tuning: psycopg applies it, and the engine's statements are prepared at once.
    """
    options = settings_dict.get("OPTIONS") or {}
    if "prepare_threshold" in options and options["prepare_threshold"] is None:
        return False
    return not settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")


class _PreparingCursor(ServerBindingCursor):
    """A server-side-binding cursor that prepares every statement on its first execution.

    Why: an enqueue is one large statement (a CTE with nextval, ON CONFLICT on a partial
    index, the events' advisory lock, an event insert, two NOTIFYs) and PostgreSQL spent more
    time planning it afresh than running it. Prepared once per connection, an enqueue in
    autocommit with Django's default options went from about 1,060 to 1,850 jobs/s (one
    process, alternating blocks with and without), and measured side by side
    (``python -m bench``, docs/performance.md) from 0.22x to 0.76x the bare psycopg
    insert+NOTIFY and from 0.62x to 2.2x Procrastinate's defer. The engine's statements have
    a handful of texts (one per batch shape), far under psycopg's cache of 100 per connection.
    Used only when ``engine_prepares`` allows it.
    """

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = True, **kw: Any
    ) -> Any:
        return super().execute(query, params, prepare=prepare, **kw)  # type: ignore[misc]  # a psycopg Cursor (django-stubs lack the base)


class _PlanningCursor(ServerBindingCursor):
    """A server-side-binding cursor whose statements are never prepared: planned on each
    execution, for the table as it is then (see ``Store.planned_cursor``)."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = False, **kw: Any
    ) -> Any:
        return super().execute(query, params, prepare=False, **kw)  # type: ignore[misc]  # a psycopg Cursor (django-stubs lack the base)


# libpq options a worker sets on its connections unless the project's OPTIONS set them
# (``Store.worker_connection_options``): without them a silent network (packets dropped, no
# reset) holds a statement for the kernel's retransmissions (about 15 minutes), and an idle
# connection, such as LISTEN's, never learns that the server went away. With them, bytes
# unacknowledged for tcp_user_timeout fail the connection, and so do keepalives_count
# unanswered probes on a connection that is idle or waiting on a reply (after 25 s), and a
# connection attempt after connect_timeout; the worker then reconnects with backoff. A long
# query on a healthy network is not cut short.
SILENT_NETWORK_BOUNDS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
    "connect_timeout": 10,
}


class ServerCursors(StoreCore):
    """``prepared_cursor`` and ``planned_cursor`` as PostgreSQL's server-side-binding cursors."""

    def prepared_cursor(self) -> Any:
        # Server-side binding: the parameters travel apart from the SQL text, so each hot
        # statement has one text, and the engine prepares it on first use (see
        # _PreparingCursor). Django's own cursors bind on the client, which also costs a
        # literal per array element.
        return self._server_cursor(prepare=True)

    def planned_cursor(self) -> Any:
        # Server-side binding, never prepared (see Store.planned_cursor).
        return self._server_cursor(prepare=False)

    def _server_cursor(self, *, prepare: bool) -> Any:
        db = self.connection
        db.close_if_health_check_failed()
        db.ensure_connection()
        with db.wrap_database_errors:
            raw = db.connection
            prepares = engine_prepares(db.settings_dict)
            if prepares and raw.prepare_threshold is None:
                # Django's default (None) would turn off every prepare, ours included. A
                # threshold no query reaches keeps the user's own queries as they were.
                raw.prepare_threshold = NEVER_BY_COUNT
            if not prepare:
                cursor: Any = _PlanningCursor(raw)  # type: ignore[call-arg]  # as above
            else:
                kind = _PreparingCursor if prepares else ServerBindingCursor
                cursor = kind(raw)  # type: ignore[call-arg]
            tz_loader = raw.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
            if db.timezone != tz_loader.timezone:
                register_tzloader(db.timezone, cursor)
        db.validate_thread_sharing()
        return db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)
