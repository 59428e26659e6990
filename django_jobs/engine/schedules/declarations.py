"""Schedules declared in code: ``schedule(...)`` registers a ``ScheduleHandle`` in this
process, and the scheduler's tick writes them to their rows (``sync_declared``).

A declared schedule is checked as it is declared (``validate_schedule``: the same checks as
a run-time one, ``engine.schedules.checks``), but its kind need not be registered yet. Its
row is the code's: the sync creates it, follows the code's changes, and disables (never
deletes) a row whose declaration is gone.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ... import clock
from ...conf import jobs_settings
from ...durations import Duration
from ...exceptions import InvalidPayload, InvalidSchedule
from ...kinds.handle import JobHandle
from ...models import Schedule
from .checks import (
    check_catch_up,
    check_every,
    check_expires,
    check_name,
    check_payload,
    check_priority,
    check_queue,
    check_timing,
    check_tz,
)
from .service import EVERY_TZ, next_run_or_none, upcoming_of

logger = logging.getLogger("django_jobs.scheduler")

_declared: dict[str, ScheduleHandle] = {}
_lock = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class ScheduleHandle:
    """A declared schedule."""

    name: str
    cron: str
    tz: str
    kind: str
    payload: Any
    catch_up: str
    every: timedelta | None = None
    queue: str | None = None
    priority: int | None = None
    expires: timedelta | None = None

    def next_runs(self, n: int = 5, after: datetime | None = None) -> list[datetime]:
        """The next ``n`` occurrences strictly after ``after`` (default now), aware UTC."""
        return upcoming_of(self.cron, self.tz, after or clock.now(), n, self.every)


def validate_schedule(
    *,
    name: str,
    cron: str | None,
    tz: str | None,
    kind: str,
    payload: Any,
    catch_up: str,
    every: Any = None,
) -> str:
    """Check every part of a declared schedule; return the normalized cron (``""`` for an
    interval schedule). Raises ``InvalidSchedule`` (a bad payload too: the declaration is
    what to fix). The kind need not be registered yet: ``@job`` modules may load after the
    declaration."""
    check_name(name)
    normalized, interval = check_timing(cron, every)
    if interval is None or tz is not None:
        check_tz(tz)
    check_catch_up(catch_up)
    try:
        check_payload(None, payload, what=f"payload of schedule {name!r}")
    except InvalidPayload as exc:
        raise InvalidSchedule(exc.message, field="payload") from exc
    if not kind:
        raise InvalidSchedule(
            f"Schedule {name!r} needs job=: a @job handle or a kind name.", field="kind"
        )
    return normalized


def schedule(
    name: str,
    *,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | None = None,
    job: JobHandle | str,
    payload: Any = None,
    catch_up: str = "skip",
    queue: str | None = None,
    priority: int | None = None,
    expires: Duration | None = None,
) -> ScheduleHandle:
    """Declare a schedule firing ``job`` with ``payload``: at the wall-clock times of ``cron``
    in ``tz``, or at every whole multiple of ``every`` from the Unix epoch (UTC; ``tz`` is
    then optional). ``queue``, ``priority`` and ``expires`` (counted from each occurrence)
    are the enqueue options of each fired job."""
    kind = job.kind if isinstance(job, JobHandle) else str(job)
    normalized = validate_schedule(
        name=name,
        cron=cron,
        tz=tz,
        kind=kind,
        payload=payload,
        catch_up=catch_up,
        every=every,
    )
    interval = check_every(every)
    handle = ScheduleHandle(
        name=name,
        cron=normalized,
        tz=EVERY_TZ if tz is None and interval is not None else str(tz),
        kind=kind,
        payload=payload,
        catch_up=catch_up,
        every=interval,
        queue=check_queue(queue),
        priority=check_priority(priority),
        expires=check_expires(expires),
    )
    with _lock:
        _declared[name] = handle
    return handle


def declared() -> list[ScheduleHandle]:
    return sorted(_declared.values(), key=lambda h: h.name)


def undeclare(name: str) -> None:
    with _lock:
        _declared.pop(name, None)


def sync_declared(now: datetime) -> None:
    """Upsert declared schedules; disable (never delete) declared rows no longer in code."""
    alias = jobs_settings.DATABASE
    handles = {h.name: h for h in declared()}
    rows = {s.name: s for s in Schedule.objects.using(alias).filter(declared=True)}
    for name, handle in handles.items():
        row = rows.get(name)
        fields = {
            "cron": handle.cron,
            "every": handle.every,
            "tz": handle.tz,
            "kind": handle.kind,
            "payload": handle.payload,
            "catch_up": handle.catch_up,
            "queue": handle.queue,
            "priority": handle.priority,
            "expires": handle.expires,
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
                next_run_at=next_run_or_none(handle.cron, handle.tz, now, handle.every),
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
                row.next_run_at = (
                    next_run_or_none(row.cron, row.tz, now, row.every) if row.enabled else None
                )
                row.save(using=alias)
    gone = [name for name in rows if name not in handles]
    if gone:
        Schedule.objects.using(alias).filter(declared=True, name__in=gone).update(
            enabled=False, synced_at=None
        )
