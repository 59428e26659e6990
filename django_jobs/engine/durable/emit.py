"""``emit()``: record an event, admit its handlers and wake the jobs waiting for it.

Everything happens in the caller's transaction: a rolled-back emit admits and wakes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction

from ... import clock
from ...conf import jobs_settings
from ...kinds.registry import handles_on
from ...models import Event, Job, JobStep
from ...states import JobState, StepState
from ...store import get_store
from ...validation import check_key
from ...validation import storable_json as ensure_json

if TYPE_CHECKING:
    from datetime import datetime


def contains(data: Any, match: Any) -> bool:
    """JSON containment, as PostgreSQL's ``@>``: ``match`` is a sub-document of ``data``."""
    if isinstance(match, dict):
        return isinstance(data, dict) and all(
            key in data and contains(data[key], value) for key, value in match.items()
        )
    if isinstance(match, list):
        return isinstance(data, list) and all(
            any(contains(item, wanted) for item in data) for wanted in match
        )
    if isinstance(data, bool) or isinstance(match, bool):
        return data is match
    if isinstance(data, int | float) and isinstance(match, int | float):
        return data == match
    return type(data) is type(match) and data == match


def emit(name: str, data: Any, *, owner: Any = None, tenant: str | None = None) -> list[Job]:
    """Emit ``name`` with ``data`` (``django_jobs.emit``): admit one job per ``@job(on=name)``
    handler and wake matching waits, in the caller's transaction. Returns the admitted jobs."""
    check_key(name, what="event name")
    ensure_json(data, what=f"data of event {name!r}")
    alias = jobs_settings.DATABASE
    now = clock.now()
    owner_id = getattr(owner, "pk", owner)
    with transaction.atomic(using=alias):
        event = Event.objects.using(alias).create(
            name=name, data=data, owner_id=owner_id, tenant=tenant, created_at=now
        )
        jobs = [
            handle.enqueue(
                data, owner=owner_id, tenant=tenant, idempotency_key=f"event:{name}:{event.pk}"
            )
            for handle in handles_on(name)
        ]
        wake_waiters(name, data, now, alias)
    return jobs


def wake_waiters(name: str, data: Any, now: datetime, alias: str) -> None:
    pending = (
        JobStep.objects.using(alias)
        .filter(
            state=StepState.RUNNING,
            value__event=name,
            job__state__in=(JobState.WAITING, JobState.RUNNING),
        )
        .values_list("job_id", "value")
    )
    job_ids = [
        job_id
        for job_id, value in pending
        if (match := (value or {}).get("match")) is None or contains(data, match)
    ]
    if job_ids:
        get_store(alias).wake_jobs(job_ids, now)


def first_matching_event(
    name: str, match: Any, *, since: datetime, after_id: int, alias: str
) -> Event | None:
    """The earliest event ``name`` matching ``match`` since ``since`` with an id > ``after_id``."""
    candidates = (
        Event.objects.using(alias)
        .filter(name=name, created_at__gte=since, id__gt=after_id)
        .order_by("id")
    )
    for event in candidates.iterator(chunk_size=200):
        if match is None or contains(event.data, match):
            return event
    return None
