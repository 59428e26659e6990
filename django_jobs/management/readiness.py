"""Is the database ready for django_jobs: a command that finds its tables missing says so."""

from __future__ import annotations

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor


def unapplied_migrations(alias: str) -> list[str]:
    """The migrations django_jobs' tables need (its own and those it depends on) that
    ``alias`` has not applied, as ``app.name``; [] when the database cannot be reached now.

    Without it a worker on a database never migrated retries "no such table" for good, as if
    the database were away, and a ``jobs`` command shows the database's traceback. About
    40 ms (reading the migration files), as runserver's own check.
    """
    try:
        executor = MigrationExecutor(connections[alias])
        targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "django_jobs"]
        plan = executor.migration_plan(targets)
    except DatabaseError:
        return []
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def missing_migrations(alias: str) -> str | None:
    """What to do when ``alias`` lacks migrations django_jobs' tables need, or None."""
    missing = unapplied_migrations(alias)
    if not missing:
        return None
    shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
    return (
        f"The database {alias!r} lacks {len(missing)} migration(s) django_jobs needs ({shown}). "
        "Run `manage.py migrate`."
    )


#: Connections a worker process holds beside one per executor thread: its claim loop, the
#: keeper (outcomes, heartbeats), and the listener's LISTEN connection and its own queries.
WORKER_CONNECTIONS_BESIDE_THREADS = 4


def pool_too_small(alias: str, concurrency: int) -> str | None:
    """What to do when ``alias`` uses a connection pool (Django 5.1+ on PostgreSQL,
    ``OPTIONS["pool"]``) smaller than a worker process of ``concurrency`` threads holds, or None.

    Each of the worker's threads keeps its connection for as long as it runs: with too few in
    the pool, the threads past it wait 30 s for one and fail their jobs (psycopg's
    ``couldn't get a connection``), so the worker does not start.
    """
    pool = connections.settings[alias].get("OPTIONS", {}).get("pool")
    if not pool:
        return None
    options = pool if isinstance(pool, dict) else {}
    # psycopg_pool's defaults: min_size 4, max_size = min_size.
    size = options.get("max_size") or options.get("min_size", 4)
    needed = concurrency + WORKER_CONNECTIONS_BESIDE_THREADS
    if size >= needed:
        return None
    return (
        f"DATABASES[{alias!r}]['OPTIONS']['pool'] holds at most {size} connection(s); a worker "
        f"process with --concurrency {concurrency} holds {needed} (one per thread, plus "
        f'{WORKER_CONNECTIONS_BESIDE_THREADS}). Set "pool": {{"max_size": {needed}}} or more '
        "in the settings the workers run with, or lower --concurrency."
    )
