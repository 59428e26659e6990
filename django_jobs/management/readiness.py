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
