"""What every store does, in SQL both PostgreSQL and SQLite understand.

Dialects override the statements that differ: inserting a batch, claiming, and recording
successes in bulk. Timestamps always come from the caller (the engine's clock), never from the
database's ``now()``, so tests can move time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, ClassVar, Protocol
from weakref import WeakKeyDictionary

from django.db import connections, transaction
from django.db.models import JSONField, Model, Q

from .. import clock
from ..models import Job, JobStep, PrunedCount
from ..states import ENDED_STATES, EXPIRED_ERROR, LIVE_STATES, JobState, StepState
from .event_rows import Inserted, MakeRow, StoredEvent, chained

TABLE = Job._meta.db_table
STEP_TABLE = JobStep._meta.db_table
PRUNED_TABLE = PrunedCount._meta.db_table
# A row's state as the prune tests it on rows given by id: "state || ''" keeps the planner off
# the indexes on state, which on stale statistics it may pick over the primary key, reading
# every ended row of the table for each batch (measured on PostgreSQL: 1.9 s for a batch of
# 2,000 among 100,000 ended rows, against milliseconds by id).
ENDED = "state || ''"
# A concrete field always has a column (the stubs type it ``str | None``).
COLUMNS: list[str] = [f.column for f in Job._meta.concrete_fields]  # type: ignore[misc]
SELECT_COLUMNS = ", ".join(f"{TABLE}.{c}" for c in COLUMNS)
FIELD_NAMES = [f.attname for f in Job._meta.concrete_fields]

#: Outcomes after which the row keeps the id of the worker whose run it was: the job ended,
#: or stopped for a person (a job going back to the queue, or waiting, holds no worker).
KEEPS_WORKER = frozenset(
    (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.BLOCKED, JobState.UNKNOWN)
)

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
    namespace: dict[str, Any] = {"_reread": _reread, "_UTC": UTC}
    source = f"def inserted(row, job_id):\n    return {{{', '.join(items)}}}\n"
    exec(compile(source, "<django_jobs NewJob.inserted>", "exec"), namespace)
    return namespace["inserted"]


def _reread(text: str | None) -> Any:
    # A fresh value, as a read gives (the caller's object may change after the enqueue).
    return None if text is None else json.loads(text)


_inserted = _compile_inserted()


@dataclass(kw_only=True)
class Outcome:
    """The end of one execution of a claimed job, written by ``Store.record``."""

    job_id: int
    worker_id: str
    state: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    result: Any = None
    error: str | None = None
    run_at: datetime | None = None
    wait_reason: str | None = None
    progress: Any = None
    log: list[str] | None = None
    events: list[str] = field(default_factory=list)
    #: The job's trace context with its last attempt's span in it (``engine.tracing``), to
    #: store with the outcome; None (untraced): the column is left as it is.
    trace_context: dict[str, str] | None = None
    #: Called inside the transaction that records this outcome, once it is written (the jobs
    #: a run enqueued with ``after_current=True``, admitted as the run's success is recorded).
    then: Callable[[], None] | None = None


@dataclass(kw_only=True)
class ClaimSkip:
    """What a claim must pass over: queues and tenants at their cap, kinds and queues over
    their rate. ``fair`` picks round-robin across tenants (first due job of each tenant,
    then the second, ...) so one tenant's backlog never starves another. ``paused``: the
    paused queues of a claim across engines, as ``(engine, queue)`` pairs."""

    queues: list[str] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    paused: list[tuple[str, str]] = field(default_factory=list)
    fair: bool = False


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What a worker asks of ``Store.claim``: up to ``limit`` jobs due at ``now`` (which also
    becomes their ``started_at``), of ``engine`` (any engine if None) and ``queues`` (any queue
    if None), marked ``running`` for ``worker_id`` with a lease until ``leased_until``, passing
    over what ``skip`` names (caps and rates, ``engine.limits``)."""

    engine: str | None
    worker_id: str
    limit: int
    now: datetime
    leased_until: datetime
    queues: list[str] | None = None
    skip: ClaimSkip | None = None


@dataclass(slots=True, kw_only=True)
class StepRow:
    """A step's first attempt, to insert (``Store.insert_steps``): ``running``, or, written
    once at its end, ``completed`` with its ``value`` or ``failed`` with its ``error``. Only
    while ``held`` (worker id, attempt) still holds the job; None: no fence (no worker)."""

    job_id: int
    name: str
    seq: int
    key: str
    started_at: datetime
    held: tuple[str, int] | None
    state: str = StepState.RUNNING
    value: Any = None
    error: str | None = None
    ended_at: datetime | None = None


class Listener(Protocol):
    """A connection of its own that hears the store's notifications (``supports_listen``).

    A notification is a hint that rows committed, never the rows themselves: the caller reads
    the table after each wake-up, and after a timeout anyway.
    """

    def wait(self, timeout: float) -> list[str]:
        """The payloads that arrived, as soon as one does; empty after ``timeout`` seconds."""
        ...

    def wait_notifications(self, timeout: float) -> list[tuple[str, str]]:
        """As ``wait``, each payload with the channel it came on: ``(channel, payload)``."""
        ...

    def close(self) -> None: ...


class Store:
    """The SQL seam. One instance per database alias; cheap to build.

    What differs between databases is a capability flag below (as Django's
    ``connection.features``), set by each store class: callers ask the flag, never the vendor.
    """

    #: The database's name, for people (an ``explain``'s output); no caller branches on it.
    vendor = ""

    # -- capabilities -------------------------------------------------------------------------

    #: ``listen_for_jobs`` and ``listen_for_events`` can wake a waiter when rows commit
    #: (LISTEN/NOTIFY). Without it, workers and relays poll.
    supports_listen = False
    #: ``lock_jobs`` passes over rows another transaction holds (``SKIP LOCKED``) instead of
    #: waiting for them. Without it the database has one writer, and nothing to pass over.
    supports_skip_locked = False
    #: ``estimated_rows`` gives the planner's row estimate of a table, far cheaper than a
    #: ``COUNT(*)`` of a big one. Without it, it gives None and callers count.
    estimates_row_counts = False
    #: Seconds an idle worker waits between claims unless ``JOBS["POLL_INTERVAL"]`` says:
    #: short when polling is all there is, long when a notification wakes the worker first.
    poll_interval_default = 0.25
    #: ``store.events.insert`` writes a batch of event rows, its ordering lock and its
    #: notification in one statement, so in autocommit it needs no transaction of its own.
    inserts_events_in_one_statement = False
    #: Connection options (``OPTIONS`` of the alias, the project's own taking precedence) a
    #: long-running worker sets so that a silent network fails its statements in bounded time.
    worker_connection_options: ClassVar[dict[str, Any]] = {}

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

    # -- admission ----------------------------------------------------------------------------

    # True when ``insert`` writes in one statement (its reads of deduped rows aside), so in
    # autocommit it needs no transaction of its own.
    insert_is_one_statement = False
    # True when ``_insert_rows`` returns the inserted jobs in the order of their rows.
    inserts_in_row_order = False

    def stages_created_events(self) -> bool:
        """True when, inside the caller's transaction, ``_insert_rows`` writes the
        job.created rows for the commit to store (``staged_events.py``); otherwise they
        follow the commit."""
        return False

    def insert(self, rows: list[NewJob]) -> list[tuple[Job, bool]]:
        """Insert ``rows``; a row whose live key exists returns that job with ``deduped``.

        Inserting wakes the idle workers of the new rows' engines once the transaction commits
        (``_insert_rows`` sends it; a store without wake-ups sends nothing).
        """
        return self.insert_with_events(rows)[0]

    def insert_with_events(
        self, rows: list[NewJob], created: MakeRow | None = None
    ) -> tuple[list[tuple[Job, bool]], Sequence[StoredEvent]]:
        """``insert``, and with ``created`` the ``job.created`` row of each job inserted
        (``created(job)`` makes it, from the job as inserted, id included): written by the
        same statement on PostgreSQL, in the same transaction on SQLite. Returns the results
        and the event rows stored (none for a deduped row). Called in autocommit, the event
        rows take the events' write lock (``store/events.py``) until the statement ends;
        inside the caller's transaction, PostgreSQL stages them for its commit to store
        (``store/staged_events.py``), and they are read when first looked at."""
        parts: list[Sequence[StoredEvent]] = []
        return self._insert(rows, created, parts), chained(parts)

    def _insert(
        self, rows: list[NewJob], created: MakeRow | None, stored: list[Sequence[StoredEvent]]
    ) -> list[tuple[Job, bool]]:
        jobs: list[Job] = []
        if rows:
            jobs, events = self._insert_rows(rows, created)
            stored.append(events)
        if self.inserts_in_row_order and len(jobs) == len(rows):
            return [(job, False) for job in jobs]  # every row inserted: nothing to match
        inserted = {self._identity(j): j for j in jobs}
        results: list[tuple[Job, bool]] = []
        seen: set[tuple[Any, ...]] = set()
        missing = [r for r in rows if (r.kind, r.owner_id or 0, r.idempotency_key) not in inserted]
        existing = {self._identity(j): j for j in self._live_with_keys(missing)}
        for row in rows:
            identity = (row.kind, row.owner_id or 0, row.idempotency_key)
            if identity in inserted and identity not in seen:
                seen.add(identity)
                results.append((inserted[identity], False))
            elif identity in inserted:
                results.append((inserted[identity], True))
            elif identity in existing:
                results.append((existing[identity], True))
            else:
                # The live holder ended between our insert and our read: insert again.
                results.extend(self._insert([row], created, stored))
        return results

    @staticmethod
    def _identity(job: Job) -> tuple[Any, ...]:
        return (job.kind, job.owner_id or 0, job.idempotency_key)

    def _insert_rows(self, rows: list[NewJob], created: MakeRow | None) -> Inserted:
        """Insert the rows (skipping those whose key a live job holds); return the jobs
        inserted and, with ``created``, their job.created rows as stored."""
        raise NotImplementedError

    def _live_with_keys(self, rows: list[NewJob]) -> list[Job]:
        if not rows:
            return []
        keys = sorted({r.idempotency_key for r in rows})
        key_sql, key_params = self.in_list(keys)
        state_sql, state_params = self.in_list(list(LIVE_STATES))
        wanted = {(r.kind, r.owner_id or 0, r.idempotency_key) for r in rows}
        jobs = self.jobs_from(
            f"SELECT {SELECT_COLUMNS} FROM {TABLE} WHERE idempotency_key {key_sql} "
            f"AND state {state_sql}",
            [*key_params, *state_params],
        )
        return [j for j in jobs if self._identity(j) in wanted]

    def notify(self, engines: set[str]) -> None:
        """Wake idle workers of ``engines`` once the current transaction commits."""

    #: The channel ``listen_for_jobs(worker_id)`` also hears ``notify_paused`` on (its payload
    #: the engine); empty where the store does not ``supports_listen``.
    paused_channel = ""

    def notify_paused(self, engines: set[str]) -> None:
        """Tell the workers of ``engines`` that a queue was paused or resumed, once the current
        transaction commits. Only where ``supports_listen``: elsewhere workers read the paused
        queues every half second."""

    # -- claiming -----------------------------------------------------------------------------

    def claim_filters(self, request: Claim) -> tuple[str, list[Any]]:
        """The WHERE clause of "due jobs this worker may claim", and its parameters."""
        # A job that never started is not claimed past its ``expires_at`` (maintenance ends
        # it, ``end_expired``); the column is read on the rows the claim index yields anyway.
        filters = [
            "state IN ('queued', 'waiting')",
            "run_at <= %s",
            "(expires_at IS NULL OR attempts > 0 OR expires_at > %s)",
        ]
        params: list[Any] = [self.dt(request.now), self.dt(request.now)]
        if request.engine is not None:
            filters.append("engine = %s")
            params.append(request.engine)
        if request.queues:
            queue_sql, queue_params = self.in_list(list(request.queues))
            filters.append(f"queue {queue_sql}")
            params += queue_params
        skip = request.skip
        if skip is not None:
            for column, values in (("queue", skip.queues), ("kind", skip.kinds)):
                if values:
                    sql, more = self.in_list(list(values))
                    filters.append(f"NOT ({column} {sql})")
                    params += more
            if skip.tenants:
                sql, more = self.in_list(list(skip.tenants))
                filters.append(f"(tenant IS NULL OR NOT (tenant {sql}))")
                params += more
            for engine, queue in skip.paused:
                filters.append("NOT (engine = %s AND queue = %s)")
                params += [engine, queue]
        return " AND ".join(filters), params

    def fair_pick_sql(self, where: str) -> str:
        """Ids of due jobs, round-robin across tenants, in claim order within each turn."""
        return (
            "SELECT id FROM (SELECT id, priority, run_at, ROW_NUMBER() OVER ("
            "PARTITION BY COALESCE(tenant, '') ORDER BY priority, run_at, id) AS turn "
            f"FROM {TABLE} WHERE {where}) AS due ORDER BY turn, priority, run_at, id LIMIT %s"
        )

    def running_counts(self) -> tuple[int, dict[str, int], dict[str, int]]:
        """Running jobs: in all, per queue, per tenant (every engine: caps are global)."""
        rows = self.fetchall(
            f"SELECT queue, tenant, COUNT(*) FROM {TABLE} WHERE state = 'running' "
            "GROUP BY queue, tenant"
        )
        total = 0
        per_queue: dict[str, int] = {}
        per_tenant: dict[str, int] = {}
        for queue, tenant, count in rows:
            total += count
            per_queue[queue] = per_queue.get(queue, 0) + count
            if tenant is not None:
                per_tenant[tenant] = per_tenant.get(tenant, 0) + count
        return total, per_queue, per_tenant

    def started_since(self, column: str, values: list[str], since: datetime) -> dict[str, int]:
        """Jobs started after ``since`` (a window (since, now]), per ``kind`` or per ``queue``."""
        assert column in ("kind", "queue")
        sql, params = self.in_list(list(values))
        rows = self.fetchall(
            f"SELECT {column}, COUNT(*) FROM {TABLE} WHERE {column} {sql} AND started_at > %s "
            f"GROUP BY {column}",
            [*params, self.dt(since)],
        )
        return {row[0]: row[1] for row in rows}

    def claim(self, request: Claim) -> list[Job]:
        """Mark up to ``request.limit`` due jobs ``running`` for its worker and return them.

        A ``queued`` job starts a new attempt (``attempts + 1``); a ``waiting`` job being
        re-asked keeps its attempt. Jobs come back in claim order: priority, run_at, id.
        The statement is ``claim_statement``'s, so what ``explain`` shows is what runs, and
        it is planned on every execution (``planned_cursor``): the table it reads changes
        more than any other.
        """
        jobs = self.jobs_from(*self.claim_statement(request), planned=True)
        jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
        return jobs

    def claim_statement(self, request: Claim) -> tuple[str, list[Any]]:
        """The one statement ``claim`` runs for ``request``, and its parameters."""
        raise NotImplementedError

    # EXPLAIN without ANALYZE: the database plans the statement and runs none of it.
    explain_prefix = "EXPLAIN "

    def explain(self, sql: str, params: list[Any]) -> list[str]:
        """The database's plan for ``sql``, one line per row of its EXPLAIN."""
        return [str(row[0]) for row in self.fetchall(self.explain_prefix + sql, params)]

    def hand_back(self, worker_id: str, job_ids: list[int]) -> int:
        """Return claimed-but-unstarted jobs as they were, attempt not used."""
        if not job_ids:
            return 0
        id_sql, id_params = self.in_list(job_ids)
        return self.execute(
            f"UPDATE {TABLE} SET state = CASE WHEN wait_reason IS NULL THEN 'queued' "
            "ELSE 'waiting' END, attempts = CASE WHEN wait_reason IS NULL THEN attempts - 1 "
            "ELSE attempts END, worker_id = NULL, leased_until = NULL, started_at = NULL "
            f"WHERE id {id_sql} AND worker_id = %s AND state = 'running'",
            [*id_params, worker_id],
        )

    def cancels_requested(self, worker_id: str) -> list[int]:
        """The ids of ``worker_id``'s running jobs whose cancel was requested: a read, as cheap
        as a heartbeat, for workers that cannot hear ``notify_cancel`` (no ``supports_listen``)."""
        return [
            row[0]
            for row in self.fetchall(
                f"SELECT id FROM {TABLE} WHERE worker_id = %s AND state = 'running' "
                "AND cancel_requested = %s",
                [worker_id, True],
            )
        ]

    def notify_cancel(self, cancels: list[tuple[str, int]]) -> None:
        """Tell the workers holding these running jobs (worker id, job id) that their cancel
        was requested, once the caller's transaction commits. Only where ``supports_listen``:
        elsewhere the workers read ``cancels_requested`` at their poll interval."""

    def heartbeat(self, worker_id: str, leased_until: datetime) -> dict[int, bool]:
        """Extend the lease of ``worker_id``'s running jobs; return {id: cancel_requested}."""
        rows = self.fetchall(
            f"UPDATE {TABLE} SET leased_until = %s WHERE worker_id = %s AND state = 'running' "
            "RETURNING id, cancel_requested",
            [self.dt(leased_until), worker_id],
        )
        return {row[0]: bool(row[1]) for row in rows}

    def rescue(self, *, engine: str | None, now: datetime, error: str) -> list[tuple[int, str]]:
        """Re-ask running jobs whose lease ran out (their worker died).

        A job with attempts left goes back to ``queued`` now; one without fails, and, as any
        end, counts against its parent's pending children in the same transaction.
        """
        engine_sql, params = ("", []) if engine is None else (" AND engine = %s", [engine])
        with transaction.atomic(using=self.alias):
            rows = self.fetchall(
                f"UPDATE {TABLE} SET "
                "state = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END, "
                "ended_at = CASE WHEN attempts >= max_attempts THEN %s ELSE NULL END, "
                "error = %s, run_at = %s, worker_id = NULL, leased_until = NULL, "
                "wait_reason = NULL "
                f"WHERE state = 'running' AND leased_until < %s{engine_sql} "
                "RETURNING id, state, parent_id",
                [self.dt(now), error, self.dt(now), self.dt(now), *params],
            )
            self.children_ended([row[2] for row in rows if row[1] == JobState.FAILED], now)
        return [(row[0], row[1]) for row in rows]

    # -- outcomes -----------------------------------------------------------------------------

    def record(self, outcomes: list[Outcome]) -> list[int]:
        """Write outcomes in one transaction; return the ids whose lease we still held.

        The ended jobs that have a parent count against its pending children in the same
        transaction (``children_ended``): a batch without children costs nothing more.
        """
        if not outcomes:
            return []
        written: list[int] = []
        parents: list[int | None] = []
        with transaction.atomic(using=self.alias):
            # A success with a trace context to store (a traced child's, for its parent's
            # gather to link to) is written as the other outcomes are, with its context.
            successes = [
                o for o in outcomes if o.state == JobState.SUCCEEDED and o.trace_context is None
            ]
            if successes:
                for job_id, parent_id in self._record_successes(successes):
                    written.append(job_id)
                    parents.append(parent_id)
            for outcome in outcomes:
                if outcome.state == JobState.SUCCEEDED and outcome.trace_context is None:
                    continue
                held, parent_id = self._record_one(outcome)
                if held:
                    written.append(outcome.job_id)
                    if outcome.state in ENDED_STATES:
                        parents.append(parent_id)
            self.children_ended(parents, clock.now())
            for outcome in outcomes:
                if outcome.then is not None and outcome.job_id in written:
                    outcome.then()
        return written

    def _record_successes(self, outcomes: list[Outcome]) -> list[tuple[int, int | None]]:
        """Record succeeded outcomes; return (id, parent id) of each one written."""
        written = []
        for o in outcomes:
            held, parent_id = self._record_one(o)
            if held:
                written.append((o.job_id, parent_id))
        return written

    def _record_one(self, o: Outcome) -> tuple[bool, int | None]:
        """Record one outcome; return (lease still held, the job's parent id)."""
        ended = o.state in ENDED_STATES
        if o.state == JobState.WAITING:
            # A wake requested while the job ran (an emit matching its wait, or its last
            # child's end) re-asks it now; otherwise it sleeps until run_at (NULL: until woken).
            run_at_sql = "CASE WHEN wake_requested THEN %s ELSE %s END"
            run_at_params = [self.dt(o.ended_at), self.dt(o.run_at)]
        else:
            run_at_sql, run_at_params = "COALESCE(%s, run_at)", [self.dt(o.run_at)]
        # Traced: the attempt's span context goes with the outcome (the statement is the
        # untraced one otherwise, and writes nothing more).
        traced = o.trace_context is not None
        rows = self.fetchall(
            f"UPDATE {TABLE} SET state = %s, result = %s, error = %s, started_at = %s, "
            "first_started_at = COALESCE(first_started_at, %s), "
            f"ended_at = %s, run_at = {run_at_sql}, wait_reason = %s, "
            "progress = COALESCE(%s, progress), log = COALESCE(%s, log), "
            "worker_id = %s, leased_until = NULL, "
            "cancel_requested = COALESCE(%s, cancel_requested), wake_requested = false"
            f"{', trace_context = %s' if traced else ''} "
            "WHERE id = %s AND worker_id = %s AND state = 'running' RETURNING parent_id",
            [
                o.state,
                self.js(o.result),
                o.error,
                self.dt(o.started_at),
                self.dt(o.started_at),
                self.dt(o.ended_at if ended else None),
                *run_at_params,
                o.wait_reason,
                self.js(o.progress),
                self.js(o.log),
                o.worker_id if o.state in KEEPS_WORKER else None,
                # An end clears the request; a job that goes on (a retry, a wait) keeps it,
                # and its next run ends ``cancelled`` before the runner starts.
                False if ended else None,
                *([self.js(o.trace_context)] if traced else []),
                o.job_id,
                o.worker_id,
            ],
        )
        return (True, rows[0][0]) if rows else (False, None)

    # -- children -----------------------------------------------------------------------------

    def add_children(self, parent_id: int, count: int) -> None:
        """Count ``count`` more pending children on the parent (inside the spawn's transaction)."""
        self.execute(
            f"UPDATE {TABLE} SET children_pending = children_pending + %s, "
            "children_total = children_total + %s WHERE id = %s",
            [count, count, parent_id],
        )

    def adopt(self, parent_id: int, job_ids: list[int]) -> list[int]:
        """Make the live, parentless jobs among ``job_ids`` children of ``parent_id``; return
        their ids. (A deduped child: its end then wakes this parent, as a new child's would.)
        The parent itself is never adopted; a job keeps the first parent it had."""
        ids = [i for i in job_ids if i != parent_id]
        if not ids:
            return []
        id_sql, id_params = self.in_list(ids)
        state_sql, state_params = self.in_list(list(LIVE_STATES))
        return [
            row[0]
            for row in self.fetchall(
                f"UPDATE {TABLE} SET parent_id = %s WHERE id {id_sql} AND parent_id IS NULL "
                f"AND state {state_sql} RETURNING id",
                [parent_id, *id_params, *state_params],
            )
        ]

    def unended_parents(self, job_ids: list[int]) -> list[int | None]:
        """The parent id of each job of ``job_ids`` that has not ended (a gather's check).

        One placeholder for the ids on PostgreSQL (``in_list``): a Django ``pk__in`` of a
        gather's page of 1,000 ids is a query text psycopg is too long to cache, parsed anew on
        each call (6 ms of a chord's 1,000-member gather, ``python -m bench.fanout``)."""
        id_sql, id_params = self.in_list(job_ids)
        state_sql, state_params = self.in_list(list(ENDED_STATES))
        return [
            row[0]
            for row in self.fetchall(
                f"SELECT parent_id FROM {TABLE} WHERE id {id_sql} AND NOT (state {state_sql})",
                [*id_params, *state_params],
            )
        ]

    def outcomes_of(self, job_ids: list[int]) -> list[tuple[int, str, Any, str | None, Any]]:
        """``(id, state, result, error, trace_context)`` of each job of ``job_ids`` still
        stored, the JSON decoded (a gather's read; one placeholder as ``unended_parents``)."""
        id_sql, id_params = self.in_list(job_ids)
        return [
            (job_id, state, _reread(result), error, _reread(trace_context))
            for job_id, state, result, error, trace_context in self.fetchall(
                f"SELECT id, state, result, error, trace_context FROM {TABLE} WHERE id {id_sql}",
                id_params,
            )
        ]

    def children_ended(self, parents: list[int | None], now: datetime) -> None:
        """Children of these parents (one entry per child) ended: decrement each parent's
        pending count, and wake a parent that reaches zero as ``wake_jobs`` does (waiting: due
        now; running: re-asked as soon as it parks). Called in the transaction that records
        the ends: the row lock on a parent serializes two children ending at once, so exactly
        one of them sees zero. Nothing runs when no parent is given."""
        counts = Counter(p for p in parents if p is not None)
        if not counts:
            return
        engines = {engine for pending, engine in self._decrement(counts, now) if pending <= 0}
        if engines:
            self.notify(engines)

    def _decrement(self, counts: dict[int, int], now: datetime) -> list[tuple[int, str]]:
        """Decrement and wake (see ``children_ended``); return (pending, engine) per parent.
        Parents are updated in id order, so two batches never wait on each other in a cycle."""
        found = []
        for parent_id in sorted(counts):
            n = counts[parent_id]
            found += self.fetchall(
                f"UPDATE {TABLE} SET children_pending = children_pending - %s, "
                "run_at = CASE WHEN children_pending - %s <= 0 AND state = 'waiting' "
                "THEN %s ELSE run_at END, "
                "wake_requested = CASE WHEN children_pending - %s <= 0 AND state = 'running' "
                "THEN %s ELSE wake_requested END "
                "WHERE id = %s RETURNING children_pending, engine",
                [n, n, self.dt(now), n, True, parent_id],
            )
        return [(row[0], row[1]) for row in found]

    def save_live(self, job_id: int, worker_id: str, progress: Any, log: list[str] | None) -> None:
        """Write coalesced progress and log lines of a running job."""
        self.execute(
            f"UPDATE {TABLE} SET progress = COALESCE(%s, progress), log = COALESCE(%s, log) "
            "WHERE id = %s AND worker_id = %s",
            [self.js(progress), self.js(log), job_id, worker_id],
        )

    def end_expired(self, now: datetime, limit: int) -> list[Job]:
        """End up to ``limit`` queued jobs that never started and whose ``expires_at`` has
        passed: ``cancelled`` with the error "expired", which also frees their idempotency
        keys (an ended job holds none). Their ends count against their parents as any
        child's end does. A job a claim holds is ``running`` by then and is passed over."""
        with transaction.atomic(using=self.alias):
            expired = self.jobs_from(
                f"UPDATE {TABLE} SET state = '{JobState.CANCELLED.value}', error = %s, "
                "ended_at = %s, wait_reason = NULL "
                f"WHERE id IN (SELECT id FROM {TABLE} WHERE state = '{JobState.QUEUED.value}' "
                "AND expires_at IS NOT NULL AND expires_at <= %s AND attempts = 0 "
                "ORDER BY expires_at LIMIT %s) "
                f"AND state = '{JobState.QUEUED.value}' AND attempts = 0 "
                f"AND expires_at <= %s RETURNING {', '.join(COLUMNS)}",
                [EXPIRED_ERROR, self.dt(now), self.dt(now), limit, self.dt(now)],
            )
            self.children_ended([job.parent_id for job in expired], now)
        return expired

    def cancel_children(self, parent_id: int, now: datetime) -> tuple[list[Job], list[int]]:
        """Cancel the children of ``parent_id`` that have not ended: at once, unless running
        (those get ``cancel_requested``, which their runner sees). Returns the jobs cancelled
        and the ids of those that are parents in turn (for the caller to go down the tree).
        Their ends count against the parent as any child's end does."""
        cancelled = self.jobs_from(
            f"UPDATE {TABLE} SET state = 'cancelled', ended_at = %s, wait_reason = NULL, "
            "cancel_requested = %s "
            "WHERE parent_id = %s AND state IN ('queued', 'waiting', 'blocked', 'unknown') "
            f"RETURNING {', '.join(COLUMNS)}",
            [self.dt(now), False, parent_id],
        )
        running = self.fetchall(
            f"UPDATE {TABLE} SET cancel_requested = %s WHERE parent_id = %s "
            "AND state = 'running' RETURNING id, children_total, worker_id",
            [True, parent_id],
        )
        self.notify_cancel([(r[2], r[0]) for r in running if r[2]])
        self.children_ended([parent_id] * len(cancelled), now)
        parents = [j.pk for j in cancelled if j.children_total] + [r[0] for r in running if r[1]]
        return cancelled, parents

    # -- steps --------------------------------------------------------------------------------
    #
    # A step's writes land only while the run that makes them still holds the job (``held``:
    # its worker id and attempt; None for a run no worker holds): a run that lost its lease
    # cannot write over what the run after it stored. Plain SQL, one statement each: built
    # through the ORM (a filter across the job relation) the fenced update cost a millisecond
    # of the worker's CPU to compile, per step write, more than the database spent on it.

    # A JSON parameter where its column's type cannot be inferred (an INSERT's SELECT list).
    json_param = "%s"

    def _held_sql(self, job_id: int, held: tuple[str, int] | None) -> tuple[str, list[Any]]:
        if held is None:
            return "", []
        return (
            f"EXISTS (SELECT 1 FROM {TABLE} WHERE id = %s AND worker_id = %s "
            "AND state = 'running' AND attempts = %s)",
            [job_id, *held],
        )

    def job_held(self, job_id: int, held: tuple[str, int]) -> bool:
        """Does the run ``held`` (worker id, attempt) still hold job ``job_id``?"""
        sql, params = self._held_sql(job_id, held)
        return bool(self.fetchall(f"SELECT {sql}", params)[0][0])

    def insert_steps(self, rows: list[StepRow]) -> list[int | None]:
        """Insert ``rows`` in one transaction (their commit: one, in autocommit); return each
        row's id, or None for a row whose run no longer holds its job (it is not written, the
        others are). Any error writes none of them."""
        if len(rows) == 1:
            return [self._insert_step(rows[0])]
        with transaction.atomic(using=self.alias):
            return [self._insert_step(row) for row in rows]

    def _insert_step(self, row: StepRow) -> int | None:
        fence, fence_params = self._held_sql(row.job_id, row.held)
        found = self.fetchall(
            f"INSERT INTO {STEP_TABLE} (job_id, name, seq, key, state, attempts, started_at, "
            f"value, error, ended_at) SELECT %s, %s, %s, %s, %s, 1, %s, {self.json_param}, %s, "
            f"%s{' WHERE ' + fence if fence else ''} RETURNING id",
            [
                row.job_id,
                row.name,
                row.seq,
                row.key,
                row.state,
                self.dt(row.started_at),
                self.js(row.value),
                row.error,
                self.dt(row.ended_at),
                *fence_params,
            ],
        )
        return found[0][0] if found else None

    def update_step(
        self, step_id: int, values: dict[str, Any], *, job_id: int, held: tuple[str, int] | None
    ) -> bool:
        """Write ``values`` (columns of the step: state, value, error, attempts, started_at,
        ended_at) to step ``step_id``; False when ``held`` no longer holds the job."""
        sets, params = [], []
        for column, value in values.items():
            sets.append(f"{column} = %s")
            if column == "value":
                params.append(self.js(value))
            elif column in ("started_at", "ended_at"):
                params.append(self.dt(value))
            else:
                params.append(value)
        fence, fence_params = self._held_sql(job_id, held)
        return (
            self.execute(
                f"UPDATE {STEP_TABLE} SET {', '.join(sets)} WHERE id = %s"
                f"{' AND ' + fence if fence else ''}",
                [*params, step_id, *fence_params],
            )
            == 1
        )

    # -- scheduling ---------------------------------------------------------------------------

    def try_scheduler_lock(self) -> bool:
        """Lead this scheduler tick? Called inside the tick's transaction."""
        return True

    # -- operator actions ---------------------------------------------------------------------

    def locked(self, job_id: int) -> Job:
        """The job row, locked for update until the surrounding transaction ends."""
        return Job.objects.using(self.alias).select_for_update().get(pk=job_id)

    def wake_jobs(self, job_ids: list[int], now: datetime) -> None:
        """Re-ask these jobs now: waiting ones at once, running ones as soon as they park."""
        id_sql, id_params = self.in_list(job_ids)
        self.execute(
            f"UPDATE {TABLE} SET run_at = %s WHERE id {id_sql} AND state = 'waiting'",
            [self.dt(now), *id_params],
        )
        self.execute(
            f"UPDATE {TABLE} SET wake_requested = %s WHERE id {id_sql} AND state = 'running'",
            [True, *id_params],
        )
        engines = {
            row[0]
            for row in self.fetchall(
                f"SELECT DISTINCT engine FROM {TABLE} WHERE id {id_sql}", id_params
            )
        }
        self.notify(engines)

    def wake_waiting(self, now: datetime) -> int:
        return self.execute(
            f"UPDATE {TABLE} SET run_at = %s WHERE state = 'waiting'", [self.dt(now)]
        )

    def count_due(self, *, engine: str | None, now: datetime) -> int:
        engine_sql, params = ("", []) if engine is None else (" AND engine = %s", [engine])
        return self.fetchall(
            f"SELECT COUNT(*) FROM {TABLE} WHERE state IN ('queued', 'waiting') "
            f"AND run_at <= %s{engine_sql}",
            [self.dt(now), *params],
        )[0][0]

    # -- retention ----------------------------------------------------------------------------

    def lock_jobs(self, condition: Q, limit: int) -> list[int]:
        """The ids of up to ``limit`` jobs matching ``condition``, locked until the surrounding
        transaction ends. Rows another transaction holds are passed over where the database
        can (``supports_skip_locked``): a prune never waits on a ``retry()`` in progress."""
        return list(
            Job.objects.using(self.alias)
            .filter(condition)
            .order_by()
            .select_for_update(skip_locked=self.supports_skip_locked)
            .values_list("pk", flat=True)[:limit]
        )

    def tally_pruned(self, job_ids: list[int]) -> None:
        """Add the ended jobs among ``job_ids`` to the pruned tally (``PrunedCount``), per kind
        and state, in one statement. Call it in the transaction that deletes them."""
        if not job_ids:
            return
        id_sql, id_params = self.in_list(job_ids)
        ended_sql, ended_params = self.in_list(list(ENDED_STATES))
        self.execute(
            f"INSERT INTO {PRUNED_TABLE} (kind, state, count) "
            f"SELECT kind, state, COUNT(*) FROM {TABLE} WHERE id {id_sql} AND {ENDED} {ended_sql} "
            "GROUP BY kind, state ON CONFLICT (kind, state) "
            f"DO UPDATE SET count = {PRUNED_TABLE}.count + excluded.count",
            [*id_params, *ended_params],
        )

    def prune_jobs(self, job_ids: list[int]) -> tuple[int, int]:
        """Delete the ended jobs among ``job_ids`` with their steps; return (jobs, steps).

        Their children lose the link to them (the ``SET_NULL`` of ``Job.parent``) and they
        count in the pruned tally, in the same transaction. A live job among the ids is left
        alone. Plain SQL, no row loaded: the caller has checked that nothing but steps and
        children refers to a job and that no deletion signal listens.
        """
        if not job_ids:
            return 0, 0
        id_sql, id_params = self.in_list(job_ids)
        ended_sql, ended_params = self.in_list(list(ENDED_STATES))
        gone = f"SELECT id FROM {TABLE} WHERE id {id_sql} AND {ENDED} {ended_sql}"
        with transaction.atomic(using=self.alias):
            self.tally_pruned(job_ids)
            steps = self.execute(
                f"DELETE FROM {STEP_TABLE} WHERE job_id IN ({gone})", [*id_params, *ended_params]
            )
            self.execute(
                f"UPDATE {TABLE} SET parent_id = NULL WHERE parent_id IN ({gone}) "
                f"AND id NOT IN ({gone})",
                [*id_params, *ended_params, *id_params, *ended_params],
            )
            jobs = self.execute(
                f"DELETE FROM {TABLE} WHERE id {id_sql} AND {ENDED} {ended_sql}",
                [*id_params, *ended_params],
            )
        return jobs, steps

    # -- reads for operators ------------------------------------------------------------------

    def estimated_rows(self, model: type[Model]) -> int | None:
        """The planner's estimate of the rows of ``model``'s table, or None when the store
        has none (``estimates_row_counts``) or the table was never analyzed."""
        return None

    def locked_children(self, parent_id: int, states: list[str]) -> list[Job]:
        """The children of ``parent_id`` in ``states``, in id order, locked for update until
        the surrounding transaction ends."""
        return list(
            Job.objects.using(self.alias)
            .select_for_update()
            .filter(parent_id=parent_id, state__in=states)
            .order_by("id")
        )

    def locked_step(self, step_id: int) -> JobStep:
        """The step row, read afresh and locked for update until the transaction ends."""
        return JobStep.objects.using(self.alias).select_for_update().get(pk=step_id)

    # -- notifications ------------------------------------------------------------------------

    def listen_for_jobs(self, worker_id: str | None = None) -> Listener:
        """A ``Listener`` that hears which engines have new due jobs (payload: the engine
        name), once their transaction commits; with ``worker_id``, also the cancels of that
        worker's running jobs (``notify_cancel``; channel: ``cancel_channel(worker_id)``,
        payload: the job id) and the pauses of queues (``notify_paused``; channel:
        ``paused_channel``, payload: the engine). Only where ``supports_listen``."""
        raise NotImplementedError(f"{type(self).__name__} cannot listen (supports_listen).")

    def listen_for_events(self) -> Listener:
        """A ``Listener`` woken when event rows commit. Only where ``supports_listen``."""
        raise NotImplementedError(f"{type(self).__name__} cannot listen (supports_listen).")

    def cancel_channel(self, worker_id: str) -> str:
        """The channel a worker hears its jobs' cancels on. Only where ``supports_listen``."""
        raise NotImplementedError(f"{type(self).__name__} cannot listen (supports_listen).")
