"""The scheduler: sync declared schedules, then fire due occurrences, one leader at a time.

On PostgreSQL the leader is whoever holds a transaction-level advisory lock for the tick;
other schedulers skip their tick. On SQLite the tick's write transaction is exclusive. Each
occurrence is enqueued with the key ``schedule:<name>:<occurrence in UTC, isoformat()>`` and
the schedule's ``checked_until`` watermark moves in the same transaction, so no occurrence
fires twice, whoever ticks.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ..conf import jobs_settings
from ..exceptions import InvalidPayload, JobsError
from ..models import Schedule
from ..permissions import can_schedule
from ..printable import printable
from ..registry import JobHandle, get
from ..store import get_store
from ..validation import storable_text
from .cron import due_occurrences, next_runs
from .schedules import declared

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobs.scheduler")


def sync_declared(now: datetime) -> None:
    """Upsert declared schedules; disable (never delete) declared rows no longer in code."""
    alias = jobs_settings.DATABASE
    handles = {h.name: h for h in declared()}
    rows = {s.name: s for s in Schedule.objects.using(alias).filter(declared=True)}
    for name, handle in handles.items():
        row = rows.get(name)
        fields = {
            "cron": handle.cron,
            "tz": handle.tz,
            "kind": handle.kind,
            "payload": handle.payload,
            "catch_up": handle.catch_up,
        }
        if row is None:
            if Schedule.objects.using(alias).filter(name=name, owner__isnull=True).exists():
                logger.warning(
                    "Declared schedule %r clashes with a run-time schedule of the "
                    "same name; rename one of them.",
                    name,
                )
                continue
            Schedule.objects.using(alias).create(
                name=name,
                declared=True,
                enabled=True,
                synced_at=now,
                checked_until=now,
                next_run_at=_next(handle.cron, handle.tz, now),
                **fields,
            )
        else:
            # Back in code after it was removed (synced_at cleared below): enable it again. A
            # schedule an operator paused stays paused, even when its code changes.
            returned = not row.enabled and row.synced_at is None
            if returned or any(getattr(row, k) != v for k, v in fields.items()):
                for key, value in fields.items():
                    setattr(row, key, value)
                if returned:
                    # Occurrences from while it was gone are not caught up.
                    row.enabled, row.synced_at, row.checked_until = True, now, now
                row.next_run_at = _next(row.cron, row.tz, now) if row.enabled else None
                row.save(using=alias)
    gone = [name for name in rows if name not in handles]
    if gone:
        Schedule.objects.using(alias).filter(declared=True, name__in=gone).update(
            enabled=False, synced_at=None
        )


def _owner_refusal(owner: Any, handle: JobHandle) -> str | None:
    """Why ``owner`` may no longer have ``handle`` fired for them; ``None`` if they may."""
    if not getattr(owner, "is_active", True):
        return "Paused: its owner's account is inactive. Reactivate it, or delete the schedule."
    if not can_schedule(owner, handle):
        return (
            f"Paused: its owner may no longer schedule {handle.kind!r}. An operator may change "
            "the kind's rights or the owner's; then enable the schedule again."
        )
    return None


def _pause(row: Schedule, reason: str, alias: str) -> list[Job]:
    """The schedule pauses itself, saying why (shown to its owner and to operators)."""
    logger.warning("Schedule %r (#%s) paused itself: %s", row.name, row.pk, reason)
    row.enabled, row.next_run_at, row.paused_reason = False, None, storable_text(reason)
    row.save(using=alias, update_fields=["enabled", "next_run_at", "paused_reason"])
    return []


def _next(cron: str, tz: str, after: datetime) -> datetime | None:
    try:
        runs = next_runs(cron, tz, after, 1)
    except JobsError:
        return None
    return runs[0] if runs else None


def tick(now: datetime, *, sync: bool = True) -> list[Job]:
    """Fire every due occurrence once (if this process leads this tick); return the jobs."""
    alias = jobs_settings.DATABASE
    store = get_store(alias)
    fired: list[Job] = []
    with transaction.atomic(using=alias):
        if not store.try_scheduler_lock():
            return []
        if sync:
            sync_declared(now)
        for row in Schedule.objects.using(alias).filter(enabled=True).order_by("name"):
            fired += _fire(row, now, alias)
    return fired


def _fire(row: Schedule, now: datetime, alias: str) -> list[Job]:
    since = row.checked_until or row.synced_at or row.created_at or now
    if since >= now:
        return []
    try:
        due = due_occurrences(
            row.cron,
            row.tz,
            since=since,
            now=now,
            grace=jobs_settings.schedule_grace,
            catch_up=row.catch_up,
        )
    except JobsError as exc:
        logger.error("Schedule %r is invalid and was skipped: %s", row.name, printable(exc))
        due = []
    handle = get(row.kind)
    jobs: list[Job] = []
    if due and handle is None:
        logger.error(
            "Schedule %r fires kind %r, which is not registered; %s occurrence(s) "
            "skipped. Define the kind or disable the schedule.",
            row.name,
            row.kind,
            len(due),
        )
        due = []
    owner = None
    if due and row.owner_id is not None:
        # Admitted like a submitted job: the owner must still be allowed to schedule the kind.
        owner = row.owner
        refusal = _owner_refusal(owner, handle)  # type: ignore[arg-type]
        if refusal is not None:
            return _pause(row, refusal, alias)
    for occurrence in due:
        key = f"schedule:{row.name}:{occurrence.isoformat()}"
        try:
            with transaction.atomic(using=alias):
                if owner is not None:
                    # as_user: the owner's tenant (TENANT_OF), so the tenant's caps apply.
                    job = handle.as_user(  # type: ignore[union-attr]
                        owner, row.payload, run_at=occurrence, idempotency_key=key
                    )
                else:
                    job = handle.enqueue(  # type: ignore[union-attr]
                        row.payload, run_at=occurrence, idempotency_key=key
                    )
                jobs.append(job)
        except InvalidPayload as exc:
            reason = f"Paused: its job was refused at admission: {exc.message}"
            return [*jobs, *_pause(row, reason, alias)]
        except JobsError as exc:
            logger.error(
                "Schedule %r could not enqueue its %s occurrence: %s",
                row.name,
                occurrence.isoformat(),
                printable(exc),
            )
    row.checked_until = now
    if jobs:
        row.last_fired_at = due[-1]
    row.next_run_at = _next(row.cron, row.tz, now)
    row.save(using=alias, update_fields=["checked_until", "last_fired_at", "next_run_at"])
    return jobs
