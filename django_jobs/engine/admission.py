"""Admission: validate, key and insert jobs inside the caller's transaction (the outbox)."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from .. import clock
from ..conf import jobs_settings
from ..durations import Duration, parse_duration
from ..exceptions import InvalidPayload, JobDuplicate, OutboxNoTransaction
from ..registry import ensure_json
from ..signals import jobs_admitted
from ..store import NewJob, get_store
from .events import publish_after_commit

if TYPE_CHECKING:
    from ..models import Job
    from ..registry import JobHandle

ON_CONFLICT = ("return", "error")


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
) -> list[Job]:
    """Insert one job per payload in one round trip; dedupe on live idempotency keys."""
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
    owner_id = getattr(owner, "pk", owner)
    rows = [
        _new_job(handle, payload, now, when, owner_id, tenant, queue, priority, idempotency_key)
        for payload in payloads
    ]
    if not rows:
        return []
    store = get_store(alias)
    # The insert also wakes the engine's idle workers, on commit only (see Store.insert).
    # In our own transaction, event stores write job.created with the jobs (jobs_admitted);
    # inside the caller's they write it after the commit, as other events.
    own_transaction = not connections[alias].in_atomic_block
    store_created = own_transaction and bool(jobs_admitted.receivers)
    if not own_transaction or not store.insert_is_one_statement or store_created:
        # Inside the caller's transaction: a savepoint, so a failed insert leaves the
        # caller's transaction usable, as it would be without us.
        with transaction.atomic(using=alias):
            results = store.insert(rows)
            created = [job for job, deduped in results if not deduped]
            if created and store_created:
                jobs_admitted.send(sender=type(created[0]), jobs=created, alias=alias)
    else:
        # Autocommit and one statement: atomic by itself, no BEGIN/COMMIT round trips.
        results = store.insert(rows)
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
        if not deduped:
            stored = job.__dict__.pop("_created_event_stored", False)
            publish_after_commit("job.created", job, alias=alias, stored=stored)
        jobs.append(job)
    return jobs


def _run_at(now: datetime, run_at: datetime | None, delay: Duration | None) -> datetime:
    if run_at is not None and delay is not None:
        raise ValueError("Pass run_at or delay, not both.")
    if delay is not None:
        return now + parse_duration(delay, name="delay")
    if run_at is not None:
        if run_at.tzinfo is None:
            raise ValueError(
                f"run_at={run_at!r} is naive; pass an aware datetime "
                "(django.utils.timezone.make_aware)."
            )
        return run_at
    return now


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
    text = ensure_json(payload, what=f"payload of {handle.kind!r}")
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    if limit and len(text.encode()) > limit:
        raise InvalidPayload(
            f"The payload of {handle.kind!r} is {len(text.encode())} bytes; the limit is {limit} "
            '(JOBS["MAX_PAYLOAD_BYTES"]). Store large data elsewhere and pass a reference.'
        )
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
