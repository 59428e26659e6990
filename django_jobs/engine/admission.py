"""Admission: validate, key and insert jobs inside the caller's transaction (the outbox)."""

from __future__ import annotations

import copy
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.db import DatabaseError, connections, transaction

from .. import clock
from ..conf import jobs_settings
from ..durations import Duration, parse_duration
from ..exceptions import InvalidDuration, JobDuplicate, OutboxNoTransaction
from ..models import Job
from ..store import NewJob, Store, get_store
from ..validation import check_key, check_label, storable_payload
from ..validation import storable_json as ensure_json
from .publish import publish_all_after_commit

if TYPE_CHECKING:
    from ..registry import JobHandle

logger = logging.getLogger("django_jobs.events")

ON_CONFLICT = ("return", "error")

#: The furthest ahead a job may be due (run_at or delay): 10 years of 366 days.
MAX_RUN_AHEAD = timedelta(days=3660)
MAX_RUN_AHEAD_WORDS = "10 years"


class CreatedEvents(Protocol):
    """Stores ``job.created`` with the jobs, in the enqueue's own transaction.

    So the event exists as soon as the job does: a client never sees ``job.started`` first.
    The live events store installs one (``set_created_events``); without one, nothing is
    stored here and ``job.created`` is only sent as ``job_event`` after the commit.
    """

    def parts(self, row: NewJob) -> tuple[str, str]:
        """The event's text before and after the job id (which the insert assigns)."""

    def store(self, alias: str, jobs: list[Job]) -> None:
        """Store the events of ``jobs`` in the admitting transaction (the store could not
        write them in its insert), and mark each job stored with ``_created_event``."""

    def stored(self, alias: str, events: list[Any]) -> None:
        """The insert stored ``events`` (and committed them): publish them on."""

    def store_committed(self, alias: str, jobs: list[Job]) -> None:
        """Store the events of ``jobs`` just after the caller's transaction committed them;
        mark each job stored with ``_created_event``. Never raises."""


_created_events: CreatedEvents | None = None


def set_created_events(writer: CreatedEvents | None) -> CreatedEvents | None:
    """Install the writer of ``job.created`` rows (``None``: none); return the previous one."""
    global _created_events
    previous, _created_events = _created_events, writer
    return previous


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
    parent: int | None = None,
) -> list[Job]:
    """Insert one job per payload in one round trip; dedupe on live idempotency keys.

    ``parent``: the id of the job spawning these (``ctx.step.spawn``, which also counts them
    on the parent's row); None for a top-level job.
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
    owner_id = _owner_id(owner)
    tenant = None if tenant is None else check_label(str(tenant), what="tenant")
    if queue is not None:
        check_label(str(queue), what="queue")
    if idempotency_key is not None:
        check_key(idempotency_key)
    rows = [
        _new_job(handle, payload, now, when, owner_id, tenant, queue, priority, idempotency_key)
        for payload in payloads
    ]
    if parent is not None:
        for row in rows:
            row.parent_id = parent
    if not rows:
        return []
    store = get_store(alias)
    # The insert also wakes the engine's idle workers, on commit only (see Store.insert).
    # In our own transaction job.created is stored with the jobs: by the insert statement
    # itself when the store can (PostgreSQL), else just after it. Inside the caller's
    # transaction it is stored just after the commit (holding the events' write lock until
    # the caller commits would serialize every writer behind it).
    writer = _created_events
    own_transaction = not connections[alias].in_atomic_block
    if own_transaction and store.insert_is_one_statement:
        # Autocommit and one statement: atomic by itself, no BEGIN/COMMIT round trips. The
        # statement stores job.created too when the store can.
        if writer is not None and store.inserts_created_events:
            for row in rows:
                row.created_event = writer.parts(row)
        results = _insert_with_created_events(store, rows)
        created = [job for job, deduped in results if not deduped]
        events = [
            job.__dict__["_created_event"] for job in created if "_created_event" in job.__dict__
        ]
        if writer is not None and events:
            writer.stored(alias, events)
    else:
        # Inside the caller's transaction: a savepoint, so a failed insert leaves the
        # caller's transaction usable, as it would be without us.
        with transaction.atomic(using=alias):
            results = store.insert(rows)
            created = [job for job, deduped in results if not deduped]
            if writer is not None and own_transaction and created:
                writer.store(alias, created)
        if writer is not None and not own_transaction and created:
            # job.created is stored right after the caller's commit, before the commit returns
            # (a worker woken by it has yet to claim), not by the writer thread: so it almost
            # always precedes job.started.
            transaction.on_commit(lambda: writer.store_committed(alias, created), using=alias)
    if created:
        publish_all_after_commit("job.created", created, alias=alias)
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


def _insert_with_created_events(store: Store, rows: list[NewJob]) -> list[tuple[Job, bool]]:
    """``store.insert`` in autocommit; if the statement storing job.created fails, it
    rolled back whole: insert again without the events (they follow the commit)."""
    try:
        return store.insert(rows)
    except DatabaseError:
        if rows[0].created_event is None:
            raise
        logger.warning(
            "Cannot store job.created with its jobs; it follows the commit.", exc_info=True
        )
    for row in rows:
        row.created_event = None
    return store.insert(rows)


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
    return NewJob(
        kind=handle.kind,
        queue=queue or handle.queue,
        engine=handle.engine,
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
