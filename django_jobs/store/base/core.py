"""The store's footing: its connection, value adaptation, running a statement, and building
``Job`` instances from a statement's rows (the one place that does)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any
from weakref import WeakKeyDictionary

from django.db import connections
from django.db.models import JSONField

from ...models import Job
from .columns import FIELD_NAMES, TABLE
from .features import StoreFeatures

# Per database connection: (column index, Col, converters) of the columns that need converting.
_CONVERTERS: WeakKeyDictionary[Any, list[tuple[int, Any, list[Any]]]] = WeakKeyDictionary()


def _converters(connection: Any) -> list[tuple[int, Any, list[Any]]]:
    try:
        return _CONVERTERS[connection]
    except KeyError:
        pass
    found = []
    for index, f in enumerate(Job._meta.concrete_fields):
        col = f.get_col(TABLE)
        functions = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if isinstance(f, JSONField):
            functions = [_json_loader(f) if fn == f.from_db_value else fn for fn in functions]
        if functions:
            found.append((index, col, functions))
    _CONVERTERS[connection] = found
    return found


def _json_loader(f: JSONField) -> Callable[[Any, Any, Any], Any]:
    """``JSONField.from_db_value`` of ``f`` for a whole column, with one decoder for every row.

    Django's calls ``json.loads(value, cls=decoder)``, which builds a decoder per value: a
    claim decodes two JSON columns per job (payload and log), and that construction was a
    third of their decoding in the drain's profile (py-spy, ``runjobs --burst``). A decoder
    holds no state between calls (``json.loads`` itself shares one across threads)."""
    decode = (f.decoder or json.JSONDecoder)().decode

    def from_db_value(value: Any, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        try:
            return decode(value)
        except json.JSONDecodeError:
            return value  # as Django's: text that is not JSON comes back as it is

    return from_db_value


class StoreCore(StoreFeatures):
    """One instance per database alias; cheap to build. Every statement of the store's mixins
    runs through what this holds."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def connection(self) -> Any:
        return connections[self.alias]

    # -- value adaptation ---------------------------------------------------------------------

    def dt(self, value: datetime | None) -> Any:
        return self.connection.ops.adapt_datetimefield_value(value)

    def js(self, value: Any) -> str | None:
        return None if value is None else json.dumps(value, separators=(",", ":"))

    def in_list(self, values: list[Any]) -> tuple[str, list[Any]]:
        """SQL for ``column IN (...)`` matching ``values``; PostgreSQL uses ``= ANY``."""
        raise NotImplementedError

    def raw_jobs(self, sql: str, params: list[Any]) -> list[Job]:
        return list(Job.objects.using(self.alias).raw(sql, params))

    def execute(self, sql: str, params: list[Any] | None = None) -> int:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params or [])
            return cursor.rowcount

    def fetchall(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params or [])
            return cursor.fetchall()

    def prepared_cursor(self) -> Any:
        """A cursor for the engine's own hot statements (PostgreSQL: prepared ones)."""
        return self.connection.cursor()

    def planned_cursor(self) -> Any:
        """A cursor whose statements are planned afresh on every execution.

        For the claim: a prepared statement may settle on a generic plan, and one made while
        the job table was empty (a new deployment, a worker started before any job) scans the
        whole table once jobs arrive, until the table is next analyzed. Measured: with 50,000
        queued jobs, claims of 8 took 69 ms each on the generic plan made on the empty table,
        against well under a millisecond planned afresh. Planning once per claimed batch costs
        little beside the batch.
        """
        return self.connection.cursor()

    def jobs_from(self, sql: str, params: list[Any], *, planned: bool = False) -> list[Job]:
        """Run ``sql``, which returns ``COLUMNS`` in order, and build a ``Job`` per row.

        What ``raw_jobs`` does without a ``RawQuerySet``: the same converters (JSON decoding,
        SQLite's dates and booleans) and what ``Job.from_db`` does (``Job.built``, then the
        timestamps normalized), at a fraction of the cost per row. ``planned``: through
        ``planned_cursor`` (never prepared), else ``prepared_cursor``.

        Measured (``python -m bench.phases``' claim, CPU per job, PostgreSQL, the minimum of
        five runs of 3,400 jobs, the three ways alternated in one process): 35.7 us built here,
        40.8 us through ``Job.from_db`` per row (the same cursor and converters), 56.5 us
        through ``raw()`` (``raw_jobs``). The one place jobs are built from a statement's rows.
        """
        connection = self.connection
        with self.planned_cursor() if planned else self.prepared_cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if not rows:
            return []
        converters = _converters(connection)
        names = FIELD_NAMES
        rows_values = []
        for row in rows:
            values = list(row)
            for index, col, functions in converters:
                value = values[index]
                for function in functions:
                    value = function(value, col, connection)
                values[index] = value
            rows_values.append(dict(zip(names, values, strict=True)))
        jobs = Job.built(self.alias, rows_values)
        for job in jobs:
            job.normalize_timestamps()  # as Job.from_db does
        return jobs
