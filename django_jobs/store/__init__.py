"""The storage seam: every SQL statement of the engine lives under this package."""

from __future__ import annotations

from django.db import connections

from ..conf import jobs_settings
from .base import Claim, NewJob, Outcome, Store


def get_store(alias: str | None = None) -> Store:
    alias = alias or jobs_settings.DATABASE
    vendor = connections[alias].vendor
    # Only the configured database's store is imported: store.postgres loads psycopg, which
    # an installation on SQLite may lack.
    if vendor == "postgresql":
        from .postgres import PostgresStore

        return PostgresStore(alias)
    if vendor == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(alias)
    raise NotImplementedError(
        f"django_jobs supports PostgreSQL and SQLite; database {alias!r} is {vendor}. "
        'Point JOBS["DATABASE"] at a PostgreSQL or SQLite alias.'
    )


__all__ = ["Claim", "NewJob", "Outcome", "Store", "get_store"]
