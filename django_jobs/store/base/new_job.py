"""A new job's row (``NewJob``: what admission hands the store, already validated) and the one
list of columns both stores insert from: its column fields, the constants every new job starts
with, and the row as a read would give it back."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from ...states import JobState
from .columns import FIELD_NAMES


def _column(sql_type: str, *, per_row: bool = False, sent_as: str = "") -> dict[str, Any]:
    """The metadata of a ``NewJob`` field that is a column of the inserted row, of its name.

    ``sql_type``: its PostgreSQL type; ``per_row``: the rows of one admission may differ in it
    (the others they share, see ``BATCH_SHARED``); ``sent_as``: the method giving the value
    as the insert sends it (the JSON columns' text), when not the field itself.
    """
    return {"sql_type": sql_type, "per_row": per_row, "sent_as": sent_as}


@dataclass(kw_only=True)
class NewJob:
    """A row to insert, already validated. Its column fields are the one list the stores'
    inserts are made from (``INSERT_COLUMNS``)."""

    kind: str = field(metadata=_column("varchar"))
    queue: str = field(metadata=_column("varchar"))
    engine: str = field(metadata=_column("varchar"))
    payload: Any = field(metadata=_column("jsonb", per_row=True, sent_as="payload_text"))
    owner_id: Any = field(metadata=_column("bigint"))
    tenant: str | None = field(metadata=_column("varchar"))
    priority: int = field(metadata=_column("smallint"))
    max_attempts: int = field(metadata=_column("int"))
    idempotency_key: str = field(metadata=_column("varchar", per_row=True))
    version: str = field(metadata=_column("varchar"))
    captured: Any = field(metadata=_column("jsonb", per_row=True, sent_as="captured_text"))
    run_at: datetime = field(metadata=_column("timestamptz"))
    created_at: datetime = field(metadata=_column("timestamptz"))
    # The job that spawned this one (``ctx.step.spawn``), or None.
    parent_id: int | None = field(default=None, metadata=_column("bigint"))
    # ``expires=``: not started by then, it is never run (None: it never expires).
    expires_at: datetime | None = field(default=None, metadata=_column("timestamptz"))
    # The enqueuing span's W3C trace context (``engine.tracing``); None when none was active.
    # The rows of one admission share it (one ``send`` span).
    trace_context: dict[str, str] | None = field(
        default=None, metadata=_column("jsonb", sent_as="trace_context_text")
    )
    # The JSON text of payload and captured when admission already made it (saves a dump).
    payload_json: str | None = None
    captured_json: str | None = None

    def payload_text(self) -> str | None:
        """The payload as JSON text; None (SQL NULL, not JSON null) for a None payload."""
        if self.payload is None:
            return None
        return self.payload_json or json.dumps(self.payload, separators=(",", ":"))

    def captured_text(self) -> str | None:
        if self.captured is None:
            return None
        return self.captured_json or json.dumps(self.captured, separators=(",", ":"))

    def trace_context_text(self) -> str | None:
        if self.trace_context is None:
            return None
        return json.dumps(self.trace_context, separators=(",", ":"))

    def inserted(self, job_id: int) -> dict[str, Any]:
        """Every column of the row inserted from this, as a read gives them back (in field
        order; timestamps in UTC, the connection's time zone; JSON decoded afresh)."""
        return _inserted(self, job_id)


@dataclass(frozen=True, slots=True)
class InsertColumn:
    """A column a new job's row takes from its ``NewJob``."""

    name: str
    #: Its PostgreSQL type (the insert casts the parameters sent to it).
    sql_type: str
    #: May the rows of one admission differ in it?
    per_row: bool
    #: The value as sent: JSON columns as text.
    value: Callable[[NewJob], Any]

    @property
    def is_json(self) -> bool:
        return self.sql_type == "jsonb"

    @property
    def is_instant(self) -> bool:
        return self.sql_type == "timestamptz"


#: The columns of a new job from its ``NewJob``, in field order: what both stores insert.
INSERT_COLUMNS: tuple[InsertColumn, ...] = tuple(
    InsertColumn(
        f.name,
        f.metadata["sql_type"],
        f.metadata["per_row"],
        getattr(NewJob, f.metadata["sent_as"]) if f.metadata["sent_as"] else attrgetter(f.name),
    )
    for f in fields(NewJob)
    if "sql_type" in f.metadata
)

#: The columns every new job starts with the same value in (the others are NULL).
INSERT_CONSTANTS: dict[str, Any] = {
    "state": JobState.QUEUED.value,  # a plain str: the insert writes it as a literal
    "attempts": 0,
    "log": [],
    "attempt_history": [],
    "cancel_requested": False,
    "wake_requested": False,
    "timestamps_derived": False,
    "children_pending": 0,
    "children_total": 0,
}

#: What the rows of one admission share: they differ only in payload, key and captured value.
BATCH_SHARED = attrgetter(*(c.name for c in INSERT_COLUMNS if not c.per_row))


def constant_sql(value: Any, *, booleans: tuple[str, str], json_cast: str = "") -> str:
    """An ``INSERT_CONSTANTS`` value as an SQL literal of the dialect (``booleans``: false's
    and true's; ``json_cast``: what follows a JSON text)."""
    if isinstance(value, bool):
        return booleans[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return "'" + json.dumps(value).replace("'", "''") + "'" + json_cast


def insert_sql(
    values: list[str], *, booleans: tuple[str, str], json_cast: str = ""
) -> tuple[str, str]:
    """A new job's INSERT: its column list and its value list. ``values`` holds the dialect's
    expression for each of ``INSERT_COLUMNS``, in order; the constants follow, written as the
    dialect writes them (``constant_sql``)."""
    names = [*(c.name for c in INSERT_COLUMNS), *INSERT_CONSTANTS]
    constants = [
        constant_sql(v, booleans=booleans, json_cast=json_cast) for v in INSERT_CONSTANTS.values()
    ]
    return ", ".join(names), ", ".join([*values, *constants])


def _compile_inserted() -> Callable[[NewJob, int], dict[str, Any]]:
    """``NewJob.inserted``, generated from the lists above (a dict literal: it runs for every
    job admitted, and a loop over the columns costs several times more)."""
    columns = {c.name: c for c in INSERT_COLUMNS}
    optional = {f.name for f in fields(NewJob) if f.default is None}
    items = []
    for name in FIELD_NAMES:
        column = columns.get(name)
        if name == "id":
            value = "job_id"
        elif column is not None and column.is_json:
            value = f"_reread(row.{column.value.__name__}())"
        elif column is not None and column.is_instant and name in optional:
            value = f"(None if row.{name} is None else row.{name}.astimezone(_UTC))"
        elif column is not None and column.is_instant:
            value = f"row.{name}.astimezone(_UTC)"
        elif column is not None:
            value = f"row.{name}"
        else:  # a constant (a list literal is a new list each time), or NULL
            value = repr(INSERT_CONSTANTS.get(name))
        items.append(f"{name!r}: {value}")
    namespace: dict[str, Any] = {"_reread": reread, "_UTC": UTC}
    source = f"def inserted(row, job_id):\n    return {{{', '.join(items)}}}\n"
    exec(compile(source, "<django_jobs NewJob.inserted>", "exec"), namespace)
    return namespace["inserted"]


def reread(text: str | None) -> Any:
    # A fresh value, as a read gives (the caller's object may change after the enqueue).
    return None if text is None else json.loads(text)


_inserted = _compile_inserted()
