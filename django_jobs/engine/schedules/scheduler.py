"""The scheduler: sync declared schedules, then fire due occurrences, one leader at a time.

On PostgreSQL the leader is whoever holds a transaction-level advisory lock for the tick;
other schedulers skip their tick. On SQLite the tick's write transaction is exclusive. Each
occurrence is enqueued with the key ``schedule:<name>:<occurrence in UTC, isoformat()>`` and
the schedule's ``checked_until`` watermark moves in the same transaction, so no occurrence
fires twice, whoever ticks.

A member's schedule (its owner is not an operator) is held to what the member may do by hand:
it fires at most once a minute (``schedules.MEMBER_MIN_INTERVAL``), and each job it fires
spends a unit of its owner's ``JOBS["MEMBER_RATE"]``, the budget of their submits. An
occurrence past either is skipped, never queued for later: a log line says so and
``signals.schedule_skipped`` is sent.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ...conf import jobs_settings
from ...exceptions import InvalidPayload, JobsError
from ...kinds.registry import get
from ...models import Schedule
from ...permissions import is_operator
from ...printable import printable
from ...signals import schedule_skipped
from ...store import get_store
from ...throttling import give_back, spend
from ..observe.tracing import scheduled
from .checks import MEMBER_MIN_INTERVAL, owner_refusal
from .cron import due_occurrences
from .declarations import sync_declared
from .service import next_run_or_none, pause

if TYPE_CHECKING:
    from ...models import Job

logger = logging.getLogger("django_jobs.scheduler")


def tick(now: datetime, *, sync: bool = True) -> list[Job]:
    """Fire every due occurrence once (if this process leads this tick); return the jobs."""
    return tick_until(now, sync=sync)[0]


def tick_until(now: datetime, *, sync: bool = True) -> tuple[list[Job], datetime | None]:
    """``tick``, and the earliest next occurrence of the enabled schedules after it (None:
    none, or another process leads this tick): when the next tick has something to fire."""
    alias = jobs_settings.DATABASE
    store = get_store(alias)
    fired: list[Job] = []
    upcoming: list[datetime] = []
    with transaction.atomic(using=alias):
        if not store.try_scheduler_lock():
            return [], None
        if sync:
            sync_declared(now)
        for row in Schedule.objects.using(alias).filter(enabled=True).order_by("name"):
            fired += _fire(row, now, alias)
            if row.enabled and row.next_run_at is not None:
                upcoming.append(row.next_run_at)
    return fired, min(upcoming, default=None)


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
            every=row.every,
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
        refusal = owner_refusal(owner, handle)  # type: ignore[arg-type]
        if refusal is not None:
            return _pause(row, refusal)
    member = owner is not None and not is_operator(owner)
    if member:
        due = _once_a_minute(row, due)
    rate = jobs_settings.MEMBER_RATE if member else None
    fired_at = row.last_fired_at
    for occurrence in due:
        if rate:
            wait = spend(f"member:{owner.pk}", rate, now=now)  # type: ignore[union-attr]
            if wait is not None:
                _skip(
                    row,
                    occurrence,
                    f'its owner\'s rate is spent (JOBS["MEMBER_RATE"] is {rate}): the '
                    "schedule's jobs count toward it, as the owner's submits do",
                )
                continue
        key = f"schedule:{row.name}:{occurrence.isoformat()}"
        # The schedule's enqueue options; ``expires`` counts from the occurrence (its run_at).
        options: dict[str, Any] = {
            "queue": row.queue,
            "priority": row.priority,
            "expires": row.expires,
        }
        try:
            with transaction.atomic(using=alias), scheduled(row.name):
                if owner is not None:
                    # as_user: the owner's tenant (TENANT_OF), so the tenant's caps apply.
                    job = handle.as_user(  # type: ignore[union-attr]
                        owner, row.payload, run_at=occurrence, idempotency_key=key, **options
                    )
                else:
                    job = handle.enqueue(  # type: ignore[union-attr]
                        row.payload, run_at=occurrence, idempotency_key=key, **options
                    )
                jobs.append(job)
                fired_at = occurrence
            if rate and job.deduped:  # fired already (its key holds a live job): no new work
                give_back(f"member:{owner.pk}", rate)  # type: ignore[union-attr]
        except InvalidPayload as exc:
            if rate:
                give_back(f"member:{owner.pk}", rate)  # type: ignore[union-attr]
            reason = f"Paused: its job was refused at admission: {exc.message}"
            return [*jobs, *_pause(row, reason)]
        except JobsError as exc:
            if rate:
                give_back(f"member:{owner.pk}", rate)  # type: ignore[union-attr]
            logger.error(
                "Schedule %r could not enqueue its %s occurrence: %s",
                row.name,
                occurrence.isoformat(),
                printable(exc),
            )
    row.checked_until = now
    row.last_fired_at = fired_at
    row.next_run_at = next_run_or_none(row.cron, row.tz, now, row.every)
    row.save(using=alias, update_fields=["checked_until", "last_fired_at", "next_run_at"])
    return jobs


def _pause(row: Schedule, reason: str) -> list[Job]:
    """The schedule pauses itself, saying why (shown to its owner and to operators)."""
    logger.warning("Schedule %r (#%s) paused itself: %s", row.name, row.pk, reason)
    pause(row, reason=reason)
    return []


def _once_a_minute(row: Schedule, due: list[datetime]) -> list[datetime]:
    """The occurrences a member's schedule may fire: none within a minute of the one before
    (a schedule made faster by an operator or in code, for a member owner); the others are
    skipped."""
    kept: list[datetime] = []
    skipped: list[datetime] = []
    previous = row.last_fired_at
    for occurrence in due:
        if previous is not None and occurrence - previous < MEMBER_MIN_INTERVAL:
            skipped.append(occurrence)
        else:
            kept.append(occurrence)
            previous = occurrence
    if skipped:
        _skip(
            row,
            skipped[-1],
            f"a member's schedule fires at most once a minute; {len(skipped)} occurrence(s) "
            "within a minute of the one before",
            level=logging.INFO,  # every tick of a fast schedule: not a warning each time
        )
    return kept


def _skip(
    row: Schedule, occurrence: datetime, reason: str, *, level: int = logging.WARNING
) -> None:
    """An occurrence not fired: logged, and ``signals.schedule_skipped`` sent."""
    logger.log(
        level,
        "Schedule %r (#%s) skipped its %s occurrence: %s.",
        row.name,
        row.pk,
        occurrence.isoformat(),
        reason,
    )
    schedule_skipped.send(Schedule, schedule=row, occurrence=occurrence, reason=reason)
