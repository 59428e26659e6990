"""Schedules, as one service: every change to a ``Schedule`` row, and when it fires next.

A schedule is declared in code (``schedule(...)``, synced to a row by ``sync_declared``:
``engine/schedules/declarations.py``) or added at run time (``create``). Whoever asks, the
API, the admin, the CLI or the scheduler's tick, calls this module; the checks it applies
are ``engine/schedules/checks.py``'s, cron arithmetic itself is ``engine/schedules/cron.py``.

* **Rows.** ``create``, ``update``, ``pause``, ``resume``, ``delete`` (and their bulk forms
  for the admin's actions); ``next_run`` and ``upcoming`` say when it fires next.
* **Who may.** ``by`` is the user asking (``None``: the trusted caller), judged as
  ``engine.schedules.checks`` says: a member acts on their own schedules only, and may
  always pause what they own.

Errors say what to do next: ``InvalidSchedule`` (``.field`` names the field at fault),
``InvalidPayload`` (``PayloadTooLarge`` past ``JOBS["MAX_PAYLOAD_BYTES"]``) and
``ScheduleNotAllowed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from ... import clock
from ...conf import jobs_settings
from ...durations import Duration
from ...exceptions import InvalidSchedule, JobsError
from ...models import Schedule
from ...validation import storable_text
from . import cron as cron_rules
from .checks import (
    FIELD_CHECKS,
    check_catch_up,
    check_enabled,
    check_expires,
    check_member_count,
    check_member_timing,
    check_name,
    check_options,
    check_owner,
    check_payload,
    check_priority,
    check_queue,
    check_timing,
    check_tz,
    schedulable,
)

#: The fields ``create`` takes and ``update`` may change.
EDITABLE = (
    "name",
    "cron",
    "every",
    "tz",
    "kind",
    "payload",
    "catch_up",
    "enabled",
    "owner",
    "queue",
    "priority",
    "expires",
)
#: The enqueue options a schedule applies to each job it fires (None: the kind's own).
OPTIONS = ("queue", "priority", "expires")
#: The zone an interval schedule is stored with when none is given (it counts in UTC).
EVERY_TZ = "UTC"

__all__ = [
    "EDITABLE",
    "EVERY_TZ",
    "OPTIONS",
    "create",
    "delete",
    "delete_many",
    "next_run",
    "next_run_or_none",
    "pause",
    "pause_many",
    "resume",
    "upcoming",
    "upcoming_of",
    "update",
]


# --- when it fires --------------------------------------------------------------------------


def next_run(
    cron: str, tz: str, after: datetime, every: timedelta | None = None
) -> datetime | None:
    """The first occurrence strictly after ``after`` (aware UTC); ``None`` if it never fires
    again. Raises ``InvalidSchedule`` (field ``cron``, ``every`` or ``tz``) for a bad
    expression, interval or zone."""
    runs = upcoming_of(cron, tz, after, 1, every)
    return runs[0] if runs else None


def upcoming_of(
    cron: str, tz: str, after: datetime, n: int, every: timedelta | None = None
) -> list[datetime]:
    """The next ``n`` occurrences of ``cron`` in ``tz`` (or of the interval ``every``, with
    ``cron`` empty) strictly after ``after``, aware UTC."""
    expr, interval = check_timing(cron, every)
    if interval is not None:
        return cron_rules.next_runs(None, None, after, n, every=interval)
    return cron_rules.next_runs(expr, check_tz(tz), after, n)


def upcoming(schedule: Schedule, after: datetime | None = None, n: int = 5) -> list[datetime]:
    """The next ``n`` occurrences of a schedule row after ``after`` (default now); none while
    it is paused. Raises ``InvalidSchedule`` for a row whose cron or zone no longer parses."""
    if not schedule.enabled:
        return []
    return upcoming_of(schedule.cron, schedule.tz, after or clock.now(), n, schedule.every)


def next_run_or_none(
    cron: str, tz: str, after: datetime, every: timedelta | None = None
) -> datetime | None:
    """``next_run`` for the scheduler's bookkeeping: a row whose cron or zone no longer
    parses has no next run (the tick logs it when it is due)."""
    try:
        return next_run(cron, tz, after, every)
    except JobsError:
        return None


# --- rows -----------------------------------------------------------------------------------


def create(
    *,
    name: str,
    cron: str | None = "",
    tz: str | None = None,
    kind: str,
    payload: Any = None,
    catch_up: str = "skip",
    enabled: bool = True,
    owner: Any = None,
    by: Any = None,
    every: Duration | None = None,
    queue: str | None = None,
    priority: int | None = None,
    expires: Duration | None = None,
) -> Schedule:
    """Add a run-time schedule owned by ``owner`` (a user, a user's pk, or ``None``).

    Exactly one of ``cron`` and ``every``; ``tz`` is required with ``cron`` (an interval
    counts in UTC: ``tz`` defaults to ``"UTC"`` there). ``queue``, ``priority`` and
    ``expires`` apply to each fired job (queue and priority: operators only).

    Occurrences count from now on: a new schedule never fires for the past. A name its owner
    already uses is an ``InvalidSchedule`` on ``name``."""
    owner_id = getattr(owner, "pk", owner)
    check_owner(by, owner_id)
    check_options(by, {"queue": queue, "priority": priority})
    expr, interval = check_timing(cron, every)
    check_member_timing(by, expr, interval)
    if interval is not None and tz is None:
        tz = EVERY_TZ
    fields = {
        "name": check_name(name),
        "cron": expr,
        "every": interval,
        "tz": check_tz(tz),
        "catch_up": check_catch_up(catch_up),
        "enabled": check_enabled(enabled),
        "queue": check_queue(queue),
        "priority": check_priority(priority),
        "expires": check_expires(expires),
    }
    handle = schedulable(kind, by=by)
    check_payload(handle, payload)
    now = clock.now()
    row = Schedule(
        **fields,
        kind=handle.kind,
        payload=payload,
        owner_id=owner_id,
        synced_at=now,
        checked_until=now,
    )
    row.next_run_at = next_run(row.cron, row.tz, now, row.every) if row.enabled else None
    _save(row, by=by, new=True)
    return row


def update(schedule: Schedule, changes: Mapping[str, Any], *, by: Any = None) -> Schedule:
    """Change the fields in ``changes`` (names from ``EDITABLE``); write only those, and what
    follows from them, since the scheduler writes the others concurrently.

    Pausing (``{"enabled": False}`` alone) is always allowed to whoever may see the schedule;
    any other change needs the right to schedule its (possibly new) kind. ``next_run_at``
    follows cron, tz and enabled. A resumed or re-timed schedule fires from now on: the time
    it was paused, or its old timing, is not "missed" for catch_up. Nothing is changed on
    the row when a check refuses."""
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ValueError(f"A schedule has no editable field {unknown}; use {list(EDITABLE)}.")
    check_owner(by, schedule.owner_id)
    check_options(by, changes)
    values = {name: FIELD_CHECKS.get(name, _same)(value) for name, value in changes.items()}
    if {"cron", "every"} & set(values):
        # Exactly one of them after the change: switching means clearing the other one.
        values["cron"], values["every"] = check_timing(
            values.get("cron", schedule.cron), values.get("every", schedule.every)
        )
        check_member_timing(by, values["cron"], values["every"])
    if "owner" in values:
        values["owner_id"] = getattr(values.pop("owner"), "pk", changes["owner"])
        check_owner(by, values["owner_id"])
    pausing = set(values) <= {"enabled"} and not values.get("enabled", False)
    if not pausing:
        handle = schedulable(values.get("kind", schedule.kind), by=by)
        if "payload" in values or "kind" in values:
            check_payload(handle, values.get("payload", schedule.payload))
    after = {**{f: getattr(schedule, f) for f in ("cron", "every", "tz", "enabled")}, **values}
    resumed = values.get("enabled") is True and not schedule.enabled
    if resumed and schedule.paused_reason:
        values["paused_reason"] = None
    if {"cron", "every", "tz", "enabled"} & set(changes):
        now = clock.now()
        values["next_run_at"] = (
            next_run(after["cron"], after["tz"], now, after["every"]) if after["enabled"] else None
        )
        if resumed or {"cron", "every", "tz"} & set(changes):
            values["checked_until"] = now
    _write(schedule, values, by=by)
    return schedule


def pause(schedule: Schedule, *, reason: str | None = None, by: Any = None) -> bool:
    """Stop firing until resumed. ``reason``: why it paused itself, shown to its owner and to
    operators (the scheduler passes one). False when it was already paused (nothing written)."""
    check_owner(by, schedule.owner_id)
    if not schedule.enabled and reason is None:
        return False
    values: dict[str, Any] = {"enabled": False, "next_run_at": None}
    if reason is not None:
        values["paused_reason"] = storable_text(reason)
    _write(schedule, values)
    return True


def resume(schedule: Schedule, *, by: Any = None) -> bool:
    """Fire again, from now on (the paused time is not "missed"); clears the pause's reason.
    False when it was not paused. Refused like ``update``: the kind must still be
    schedulable (by ``by``), and the cron and zone must still parse."""
    if schedule.enabled:
        return False
    update(schedule, {"enabled": True}, by=by)
    return True


def delete(schedule: Schedule, *, by: Any = None) -> None:
    """Delete the schedule. A declared one comes back at the next sync while its
    ``schedule(...)`` call is in the code."""
    check_owner(by, schedule.owner_id)
    schedule.delete(using=jobs_settings.DATABASE)


def pause_many(schedules: QuerySet[Schedule]) -> int:
    """Pause every enabled schedule of ``schedules`` in one statement; return how many."""
    return schedules.filter(enabled=True).update(enabled=False, next_run_at=None)


def delete_many(schedules: QuerySet[Schedule]) -> list[str]:
    """Delete the run-time schedules of ``schedules``; keep the declared ones (they come
    from code and would come back at the next sync) and return their names."""
    kept = list(schedules.filter(declared=True).values_list("name", flat=True))
    schedules.filter(declared=False).delete()
    return kept


def _same(value: Any) -> Any:
    return value


def _write(schedule: Schedule, values: dict[str, Any], *, by: Any = None) -> None:
    """Save ``values`` on the row (only those fields), then set them on ``schedule``."""
    if not values:
        return
    before = {name: getattr(schedule, name) for name in values}
    for name, value in values.items():
        setattr(schedule, name, value)
    try:
        _save(schedule, update_fields=sorted(values), by=by)
    except InvalidSchedule:
        for name, value in before.items():
            setattr(schedule, name, value)
        raise


def _save(
    schedule: Schedule,
    update_fields: list[str] | None = None,
    *,
    by: Any = None,
    new: bool = False,
) -> None:
    alias = jobs_settings.DATABASE
    try:
        with transaction.atomic(using=alias):
            if new:
                check_member_count(by, schedule.owner_id, alias)
            schedule.save(using=alias, update_fields=update_fields)
    except IntegrityError:
        # Names are unique per owner: this names only the owner's own schedules.
        mine = by is not None and schedule.owner_id == getattr(by, "pk", None)
        whose = "You already have" if mine else "Its owner already has"
        raise InvalidSchedule(
            f"{whose} a schedule with this name; pick another.", field="name"
        ) from None
