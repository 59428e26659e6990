"""Admission: validate, key and insert jobs inside the caller's transaction (the outbox)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, transaction

from ... import clock
from ...conf import jobs_settings
from ...durations import Duration, parse_duration
from ...exceptions import (
    InvalidDuration,
    InvalidPayload,
    JobDuplicate,
    OutboxNoTransaction,
    UnknownKind,
)
from ...models import Job
from ...states import JobState
from ...store import NewJob, Store, get_store
from ...store.event_rows import MakeRow, StoredEvent
from ...validation import check_key, check_label, storable_payload
from ...validation import storable_json as ensure_json
from ..observe.running import CURRENT, Running
from ..observe.tracing import sending
from .publish import created_row, publish_created, storing_events

if TYPE_CHECKING:
    from ...kinds.handle import JobHandle

logger = logging.getLogger("django_jobs.events")

ON_CONFLICT = ("return", "error")

#: The furthest ahead a job may be due (run_at or delay): 10 years of 366 days.
MAX_RUN_AHEAD = timedelta(days=3660)
MAX_RUN_AHEAD_WORDS = "10 years"


def admit(
    handle: JobHandle,
    payloads: list[Any],
    *,
    owner: Any = None,
    tenant: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    delay: Duration | None = None,
    idempotency_key: str | None = None,
    on_conflict: str = "return",
    after_current: bool = False,
    parent: int | None = None,
    expires: Duration | datetime | None = None,
    idempotency_keys: Sequence[str] | None = None,
) -> list[Job]:
    """Insert one job per payload in one round trip; dedupe on live idempotency keys.

    ``idempotency_keys``: one key per payload (a flow keys each member by its position, so
    equal members do not dedupe against each other); ``idempotency_key`` is one for all.

    ``parent``: the id of the job spawning these (``ctx.step.spawn``, which also counts them
    on the parent's row); None for a top-level job. ``expires``: a job not started by then
    is never run (``expires_at``, see ``expiry``). ``after_current``: called from inside a
    running job, admit them in the transaction that records its success (``_behind``).
    """
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f'on_conflict={on_conflict!r}: use "return" or "error".')
    alias = jobs_settings.DATABASE
    if jobs_settings.OUTBOX == "required" and not connections[alias].in_atomic_block:
        raise OutboxNoTransaction(
            f'JOBS["OUTBOX"] is "required": enqueue {handle.kind!r} inside '
            f'transaction.atomic(using="{alias}") so the job commits with your data.'
        )
    now = clock.now()
    when = _run_at(now, run_at, delay)
    expires_at = expiry(when, expires)
    owner_id = _owner_id(owner)
    tenant = None if tenant is None else check_label(str(tenant), what="tenant")
    if queue is not None:
        check_label(str(queue), what="queue")
    if idempotency_key is not None:
        check_key(idempotency_key)
    if idempotency_keys is None:
        keys: Sequence[str | None] = [idempotency_key] * len(payloads)
    else:
        keys = [check_key(key) for key in idempotency_keys]
        if len(keys) != len(payloads):
            raise ValueError(f"{len(keys)} idempotency keys for {len(payloads)} payloads.")
    rows = [
        _new_job(handle, payload, now, when, owner_id, tenant, queue, priority, key)
        for payload, key in zip(payloads, keys, strict=True)
    ]
    for row in rows:
        row.parent_id, row.expires_at = parent, expires_at
    if not rows:
        return []
    # One ``send`` span for the admission (tracing on), its context stored on every row.
    with sending(rows) as send:
        jobs = _admitted(handle, rows, alias, on_conflict, after_current)
        send.sent(jobs)
    return jobs


def _admitted(
    handle: JobHandle, rows: list[NewJob], alias: str, on_conflict: str, after_current: bool
) -> list[Job]:
    running = CURRENT.get()
    if running is not None or after_current:
        behind = _behind(handle, rows, running, after_current, alias)
        if behind is not None:
            return behind
    return _store_rows(handle, rows, alias, on_conflict)


def _behind(
    handle: JobHandle,
    rows: list[NewJob],
    running: Running | None,
    after_current: bool,
    alias: str,
) -> list[Job] | None:
    """Inside a running job: the jobs to return for ``after_current=True`` (held until its
    success), or None to insert now. Enqueueing the running job's own live key without it
    raises: that would return the running job itself, and the loop it continues would stop."""
    if running is None:
        raise ValueError(
            "after_current=True queues a job behind the job that is running; this call is "
            "not inside a running job. Enqueue without it, or with run_at=/delay=."
        )
    current = running.job
    if after_current:
        # Admitted when the current job's success is recorded, in that same transaction: its
        # key is free by then, and the new job cannot start before the current one ends. An
        # attempt that does not succeed admits nothing (its rerun enqueues again).
        running.add(lambda: _store_rows(handle, rows, alias, "return"))
        return [_pending_job(row) for row in rows]
    mine = (current.kind, current.owner_id or 0, current.idempotency_key)
    if any((row.kind, row.owner_id or 0, row.idempotency_key) == mine for row in rows):
        raise JobDuplicate(
            f"Job #{current.pk} ({current.kind!r}) is running and holds the idempotency key "
            f"{current.idempotency_key!r}: enqueueing that key from inside it would return "
            "the running job itself, and nothing would run after it. Pass after_current=True "
            "to queue a new job behind this one (admitted when this one succeeds), or "
            "`return ctx.requeue(reason, after=...)` to run this job again later.",
            job=current,
        )
    if handle.idempotency_key != "call" and any(_repeats(row, current) for row in rows):
        # Its key differs (the running job came from a schedule, or with a key of its own),
        # but the new job would enqueue these arguments again from inside itself and hit its
        # own key there: fail now, on the first loop, rather than on the second. A kind keyed
        # "call" never would: each of its enqueues gets a key of its own.
        raise JobDuplicate(
            f"Job #{current.pk} ({current.kind!r}) is enqueueing itself with the same payload: "
            f"the new job would hold the key {rows[0].idempotency_key!r} and enqueue that key "
            "again from inside itself. Pass after_current=True to queue it behind this one, "
            "or `return ctx.requeue(reason, after=...)` to run this job again later.",
            job=current,
        )
    return None


def _repeats(row: NewJob, current: Job) -> bool:
    """``row`` is the running job enqueued again: same kind, owner and payload, keyed."""
    return (
        row.parent_id is None
        and row.idempotency_key is not None
        and row.kind == current.kind
        and (row.owner_id or 0) == (current.owner_id or 0)
        and row.payload == current.payload
    )


def _pending_job(row: NewJob) -> Job:
    """The unsaved job returned for ``after_current=True``: its id comes with its insert."""
    job = Job(
        kind=row.kind,
        queue=row.queue,
        engine=row.engine,
        state=JobState.QUEUED,
        payload=row.payload,
        owner_id=row.owner_id,
        tenant=row.tenant,
        priority=row.priority,
        max_attempts=row.max_attempts,
        idempotency_key=row.idempotency_key,
        version=row.version,
        captured=row.captured,
        run_at=row.run_at,
        created_at=row.created_at,
        expires_at=row.expires_at,
        trace_context=row.trace_context,
    )
    job.deduped = False
    return job


def _store_rows(handle: JobHandle, rows: list[NewJob], alias: str, on_conflict: str) -> list[Job]:
    store = get_store(alias)
    # The insert also wakes the engine's idle workers, on commit only (see Store.insert).
    # job.created is written with the jobs, by the insert itself (``created_row`` makes each
    # row once the store knows the job's id): stored at once in our own transaction. Inside
    # the caller's, PostgreSQL stages the rows for its commit to store (holding the events'
    # write lock until the caller commits would serialize every writer behind it); SQLite
    # stores them just after the commit (publish_created).
    own_transaction = not connections[alias].in_atomic_block
    writes_created = own_transaction or store.stages_created_events()
    created_event = created_row if writes_created and storing_events() else None
    # One statement (PostgreSQL) needs no transaction of its own: in autocommit it is atomic
    # by itself, with no BEGIN/COMMIT round trips; in the caller's transaction it is one
    # statement of it, as ``Model.objects.create()`` is: no savepoint (its two round trips
    # were a third of an enqueue there), so a failed insert fails the caller's transaction,
    # as a failed ``create()`` does. Several statements (SQLite) go in a transaction, a
    # savepoint inside the caller's.
    atomic = not store.insert_is_one_statement
    results, written = _insert(
        store, rows, created_event, atomic=atomic, retry=own_transaction or atomic
    )
    created = [job for job, deduped in results if not deduped]
    if created:
        publish_created(created, alias=alias, written=written)
    jobs = []
    returned: set[int] = set()
    for job, deduped in results:
        if deduped and on_conflict == "error":
            raise JobDuplicate(
                f"A live {handle.kind!r} job (#{job.pk}, {job.state}) already holds the "
                f"idempotency key {job.idempotency_key!r}. Wait for it to end, cancel it, or "
                'use on_conflict="return" to get it back.',
                job=job,
            )
        if id(job) in returned:
            job = copy.copy(job)  # a duplicate inside the batch gets its own deduped flag
        returned.add(id(job))
        job.deduped = deduped
        jobs.append(job)
    return jobs


def _insert(
    store: Store,
    rows: list[NewJob],
    created_event: MakeRow | None,
    *,
    atomic: bool,
    retry: bool,
) -> tuple[list[tuple[Job, bool]], Sequence[StoredEvent] | None]:
    """Insert the rows, with their job.created rows when ``created_event`` is given; return
    the results and the event rows stored (None: none was, they follow the commit).

    If the events cannot be written (their table is away), the insert rolled back whole:
    with ``retry`` it runs again without them, and they follow the commit (publish_created),
    for the writer to retry: a failing events table never loses a job. Without ``retry``
    (one statement inside the caller's transaction, which the failure has aborted) the error
    is the caller's, as any failed statement of its transaction."""

    def insert(
        made: MakeRow | None,
    ) -> tuple[list[tuple[Job, bool]], Sequence[StoredEvent]]:
        if not atomic:
            return store.insert_with_events(rows, made)
        with transaction.atomic(using=store.alias):
            return store.insert_with_events(rows, made)

    if created_event is not None:
        if not retry:
            return insert(created_event)
        try:
            return insert(created_event)
        except DatabaseError:
            logger.warning(
                "Cannot store job.created with its jobs; it follows the commit.", exc_info=True
            )
    return insert(None)[0], None


def _owner_id(owner: Any) -> Any:
    """The owner's pk as the job row stores it (a user, or a pk of any accepted form)."""
    owner_id = getattr(owner, "pk", owner)
    if owner_id is None:
        return None
    return Job._meta.get_field("owner").target_field.to_python(owner_id)


def _run_at(now: datetime, run_at: datetime | None, delay: Duration | None) -> datetime:
    if run_at is not None and delay is not None:
        raise ValueError("Pass run_at or delay, not both.")
    if delay is not None:
        span = parse_duration(delay, name="delay")
        if span > MAX_RUN_AHEAD:
            raise InvalidDuration(run_ahead_message(f"delay={delay!r}"))
        return now + span
    if run_at is not None:
        if run_at.tzinfo is None:
            raise ValueError(
                f"run_at={run_at!r} is naive; pass an aware datetime "
                "(django.utils.timezone.make_aware)."
            )
        if run_at - now > MAX_RUN_AHEAD:
            raise ValueError(run_ahead_message(f"run_at={run_at.isoformat()}"))
        return run_at
    return now


def expiry(run_at: datetime, expires: Duration | datetime | None) -> datetime | None:
    """The ``expires_at`` of a job due at ``run_at``: ``expires`` itself when it is an aware
    datetime, ``run_at`` plus it when it is a duration (``"10m"``, a timedelta, seconds),
    None without one. An instant already past is accepted: the job then never runs."""
    if expires is None:
        return None
    if isinstance(expires, datetime):
        if expires.tzinfo is None:
            raise ValueError(
                f"expires={expires!r} is naive; pass an aware datetime "
                '(django.utils.timezone.make_aware), or a duration such as "10m".'
            )
        return expires
    return run_at + expires_span(expires)


def expires_span(expires: Duration) -> timedelta:
    """``expires`` as a duration: at most ``MAX_RUN_AHEAD`` (``InvalidDuration`` otherwise)."""
    try:
        span = parse_duration(expires, name="expires")
    except OverflowError:
        span = MAX_RUN_AHEAD + MAX_RUN_AHEAD
    if span > MAX_RUN_AHEAD:
        raise InvalidDuration(
            f"expires={expires!r} is more than {MAX_RUN_AHEAD_WORDS}; write a shorter "
            "duration, or leave expires out for a job that never expires."
        )
    return span


#: Job.priority is a SmallIntegerField.
PRIORITY_RANGE = (-32768, 32767)


def check_options(options: dict[str, Any], *, what: str) -> None:
    """Judge enqueue options now, as ``admit`` will when they are used later (a flow's member
    is admitted when the flow spawns it): ``InvalidPayload`` naming ``what`` and the option,
    so a bad value is refused at the door instead of failing the job that applies it."""
    try:
        _check_options(options)
    except (InvalidDuration, InvalidPayload, ValueError, TypeError, OverflowError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        raise InvalidPayload(f"{what}: {message}") from None


def _check_options(options: dict[str, Any]) -> None:
    run_at = options.get("run_at")
    if run_at is not None and not isinstance(run_at, datetime):
        raise ValueError(f"run_at={run_at!r}: use an aware datetime.")
    now = clock.now()
    when = _run_at(now, options.get("run_at"), options.get("delay"))
    expiry(when, options.get("expires"))
    queue = options.get("queue")
    if queue is not None:
        if not isinstance(queue, str) or not queue.strip():
            raise ValueError(f"queue={queue!r}: name a queue (text).")
        check_label(queue, what="queue")
    priority = options.get("priority")
    low, high = PRIORITY_RANGE
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high
    ):
        raise ValueError(f"priority={priority!r}: use a whole number from {low} to {high}.")
    key = options.get("idempotency_key")
    if key is not None:
        if not isinstance(key, str):
            raise ValueError(f"idempotency_key={key!r}: use text.")
        check_key(key)
    on_conflict = options.get("on_conflict", "return")
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f'on_conflict={on_conflict!r}: use "return" or "error".')
    if not isinstance(options.get("after_current", False), bool):
        raise ValueError("after_current: use true or false.")


def captured_at_admission(handle: JobHandle, payload: Any) -> Any:
    """What ``handle``'s ``capture`` makes of ``payload`` at admission; a kind its payload
    names that nobody registered (a flow's member) is an ``InvalidPayload`` of the payload."""
    if handle.capture is None:
        return None
    try:
        return handle.capture(payload)
    except UnknownKind as exc:
        raise InvalidPayload(f"payload of {handle.kind!r}: {exc.message}") from None


def run_ahead_message(what: str) -> str:
    return (
        f"{what} is more than {MAX_RUN_AHEAD_WORDS} ahead; a job is due at most "
        f"{MAX_RUN_AHEAD_WORDS} from now. Pick an earlier time, or enqueue it closer to its date."
    )


def _new_job(
    handle: JobHandle,
    payload: Any,
    now: datetime,
    run_at: datetime,
    owner_id: Any,
    tenant: str | None,
    queue: str | None,
    priority: int | None,
    idempotency_key: str | None,
) -> NewJob:
    text = storable_payload(payload, what=f"payload of {handle.kind!r}")
    # Without an input serializer validation is the JSON check just made: skip a second dump.
    validated = payload if handle.input is None else handle.validate_payload(payload)
    captured = captured_json = None
    if handle.capture is not None:
        captured = handle.capture(validated)
        captured_json = ensure_json(captured, what=f"capture of {handle.kind!r}")
    key = idempotency_key if idempotency_key is not None else handle.key_for(payload)
    home, engine = (handle.queue, handle.engine) if handle.place is None else handle.place(payload)
    return NewJob(
        kind=handle.kind,
        queue=queue or home,
        engine=engine,
        payload=payload,
        owner_id=owner_id,
        tenant=tenant,
        priority=handle.priority if priority is None else int(priority),
        max_attempts=handle.retry.attempts,
        idempotency_key=key,
        version=handle.version,
        captured=captured,
        run_at=run_at,
        created_at=now,
        payload_json=text,
        captured_json=captured_json,
    )
