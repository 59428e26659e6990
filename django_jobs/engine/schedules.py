"""Schedules, as one service: every change to a ``Schedule`` row, and every check of one.

A schedule is declared in code (``schedule(...)``, synced to a row by ``sync_declared``) or
added at run time (``create``). Whoever asks, the API, the admin, the CLI or the scheduler's
tick, calls this module; cron arithmetic itself is ``engine/cron.py``.

* **Checks.** ``check_name``, ``check_cron``, ``check_every``, ``check_tz``,
  ``check_catch_up``, ``check_queue``, ``check_priority``, ``check_expires``,
  ``check_payload`` and ``schedulable`` judge one field each (``check_timing``: exactly one of
  cron and every); the API's serializer and the
  admin's form call them per field (so they can list every bad field at once), and ``create``
  and ``update`` call them again on whatever reaches them.
* **Who may.** ``by`` is the user asking, as the API passes its caller: a member may schedule
  only kinds that are member-safe and schedulable, only for themselves, never with a queue
  or a priority of their own (as on submit), and may always pause what they own.
  ``by=None`` is the trusted caller: code, the admin (operators only) and ``manage.py``,
  which act as the deployment. ``owner_refusal`` is the same rule as the
  scheduler applies it before each firing.
* **Rows.** ``create``, ``update``, ``pause``, ``resume``, ``delete`` (and their bulk forms
  for the admin's actions); ``next_run`` and ``upcoming`` say when it fires next.

Errors say what to do next: ``InvalidSchedule`` (``.field`` names the field at fault),
``InvalidPayload`` (``PayloadTooLarge`` past ``JOBS["MAX_PAYLOAD_BYTES"]``) and
``ScheduleNotAllowed``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from .. import clock
from ..conf import jobs_settings
from ..durations import Duration
from ..exceptions import (
    InvalidDuration,
    InvalidPayload,
    InvalidSchedule,
    JobsError,
    ScheduleNotAllowed,
)
from ..models import Schedule
from ..permissions import can_schedule, is_operator
from ..registry import JobHandle, all_handles, get
from ..validation import check_label, storable_payload, storable_text
from . import cron as cron_rules
from .admission import captured_at_admission, expires_span
from .cron import CATCH_UP_CHOICES

logger = logging.getLogger("django_jobs.scheduler")

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
PRIORITY_RANGE = (-32768, 32767)  # Job.priority is a SmallIntegerField
NAME_LENGTH: int = Schedule._meta.get_field("name").max_length or 200

#: One refusal for a kind that does not exist and one the user may not schedule: a member
#: learns nothing about the kinds they may not use.
KIND_NOT_ALLOWED = (
    "This kind does not exist or you may not schedule it: members schedule kinds that are "
    "member-safe and schedulable. The kinds list says which; ask an operator for another."
)
OPERATOR_ONLY = (
    "Only operators may set a schedule's queue or priority. Leave them out to use the kind's own."
)
#: The shortest time between two firings of a member's schedule: more often would multiply
#: the member's rate (``JOBS["MEMBER_RATE"]``) by the number of their schedules.
MEMBER_MIN_INTERVAL = timedelta(minutes=1)
NOT_YOURS = (
    "Members add, change and delete their own schedules only, and own what they add. Leave "
    "the owner out, or ask an operator."
)

__all__ = [
    "CATCH_UP_CHOICES",
    "EDITABLE",
    "ScheduleHandle",
    "check_catch_up",
    "check_cron",
    "check_every",
    "check_expires",
    "check_member_timing",
    "check_name",
    "check_payload",
    "check_priority",
    "check_queue",
    "check_timing",
    "check_tz",
    "create",
    "declared",
    "delete",
    "delete_many",
    "next_run",
    "next_run_or_none",
    "owner_refusal",
    "pause",
    "pause_many",
    "resume",
    "schedulable",
    "schedule",
    "sync_declared",
    "undeclare",
    "upcoming",
    "upcoming_of",
    "update",
    "validate_schedule",
]


# --- checks: one field each -----------------------------------------------------------------


def check_name(name: Any) -> str:
    """A schedule's name: non-empty text without control characters, at most 200 of them."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidSchedule(
            "A schedule needs a name: a non-empty string, unique among its owner's schedules.",
            field="name",
        )
    try:
        check_label(name, what="schedule name")
    except InvalidPayload as exc:
        raise InvalidSchedule(exc.message, field="name") from None
    if len(name) > NAME_LENGTH:
        raise InvalidSchedule(
            f"The schedule name is {len(name)} characters long; shorten it to {NAME_LENGTH}.",
            field="name",
        )
    return name


def check_cron(expr: Any) -> str:
    """The cron expression, normalized to its 5 fields (``"@daily"`` -> ``"0 0 * * *"``)."""
    try:
        return cron_rules.validate_cron(expr)
    except InvalidSchedule as exc:
        raise InvalidSchedule(exc.message, field="cron") from None


def check_every(value: Any) -> timedelta | None:
    """The interval of an ``every`` schedule (at least 1 s: ``"20s"``, ``"5m"``, a
    ``timedelta`` or seconds); ``None`` or ``""`` for a cron schedule."""
    if value is None or value == "":
        return None
    try:
        return cron_rules.validate_every(value)
    except InvalidSchedule as exc:
        raise InvalidSchedule(exc.message, field="every") from None


def check_timing(cron: Any, every: Any) -> tuple[str, timedelta | None]:
    """Exactly one of ``cron`` and ``every``: (the normalized cron or ``""``, the interval or
    ``None``). Raises ``InvalidSchedule`` naming the field at fault."""
    has_cron = not (cron is None or cron == "")
    interval = check_every(every)
    if has_cron and interval is not None:
        raise InvalidSchedule(
            "A schedule fires by cron or by every, not both: keep one (cron for calendar "
            'times such as "0 3 * * *", every for a fixed interval such as "20s").',
            field="every",
        )
    if interval is not None:
        return "", interval
    if not has_cron:
        raise InvalidSchedule(
            'A schedule needs cron (e.g. "0 3 * * *", or "* * * * * */20" with a seconds '
            'field) or every (an interval such as "20s"); give exactly one.',
            field="cron",
        )
    return check_cron(cron), None


def check_queue(value: Any) -> str | None:
    """The queue each fired job goes to; ``None``: the kind's own."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidSchedule(
            f"queue={value!r}: name a queue (text), or leave it out for the kind's own.",
            field="queue",
        )
    try:
        return check_label(value, what="queue")
    except InvalidPayload as exc:
        raise InvalidSchedule(exc.message, field="queue") from None


def check_priority(value: Any) -> int | None:
    """The priority of each fired job (lower runs first); ``None``: the kind's own."""
    if value is None:
        return None
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSchedule(
            f"priority={value!r}: use a whole number from {low} to {high} (lower runs first), "
            "or leave it out for the kind's own.",
            field="priority",
        )
    return value


def check_expires(value: Any) -> timedelta | None:
    """How long after its occurrence a fired job may still start (``"10m"``); ``None``:
    it never expires."""
    if value is None:
        return None
    try:
        return expires_span(value)
    except InvalidDuration as exc:
        raise InvalidSchedule(exc.message, field="expires") from None


def check_tz(tz: Any) -> str:
    """The IANA zone name the cron times are read in (required: there is no default)."""
    try:
        cron_rules.validate_tz(tz)
    except InvalidSchedule as exc:
        raise InvalidSchedule(exc.message, field="tz") from None
    return str(tz)


def check_catch_up(value: Any) -> str:
    """What to fire after missed occurrences: ``"skip"``, ``"run-once"`` or ``"run-all"``."""
    if value not in CATCH_UP_CHOICES:
        raise InvalidSchedule(
            f"catch_up={value!r}: use one of {', '.join(repr(c) for c in CATCH_UP_CHOICES)}.",
            field="catch_up",
        )
    return str(value)


def _check_enabled(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidSchedule(
            f"enabled={value!r}: use true (fire) or false (paused).", field="enabled"
        )
    return value


def check_payload(handle: JobHandle | None, payload: Any, *, what: str | None = None) -> Any:
    """The payload each occurrence enqueues, judged as admission will judge it: storable
    JSON within ``JOBS["MAX_PAYLOAD_BYTES"]``, then the kind's ``input`` serializer (when
    ``handle`` is known). Raises ``InvalidPayload`` (``PayloadTooLarge``)."""
    if what is None:
        what = f"payload of {handle.kind!r}" if handle is not None else "payload"
    storable_payload(payload, what=what)
    if handle is None:
        return payload
    validated = payload if handle.input is None else handle.validate_payload(payload)
    captured_at_admission(handle, validated)  # a flow's canvas: its members' kinds, options
    return payload


def schedulable(kind: Any, *, by: Any = None) -> JobHandle:
    """The handle of ``kind``, if ``by`` may put it on a schedule (``ScheduleNotAllowed``).

    Operators schedule any registered kind; members the member-safe, schedulable ones. For
    the trusted caller and operators an unknown kind is an ``InvalidSchedule`` that lists the
    known ones.
    """
    handle = get(kind) if isinstance(kind, str) else None
    # Operators see every kind: an unknown one is theirs to fix (400), nothing to probe.
    if by is not None and not (handle is None and is_operator(by)) and not can_schedule(by, handle):
        raise ScheduleNotAllowed(KIND_NOT_ALLOWED)
    if handle is None:
        known = ", ".join(sorted(h.kind for h in all_handles())[:20]) or "none"
        raise InvalidSchedule(
            f"No job kind {kind!r} is registered; pick one the code defines ({known}).",
            field="kind",
        )
    return handle


def _check_options(by: Any, values: Mapping[str, Any]) -> None:
    """Queue and priority are the operators' (a member's submit may not set them either)."""
    if by is None or is_operator(by):
        return
    if values.get("queue") is not None or values.get("priority") is not None:
        raise ScheduleNotAllowed(OPERATOR_ONLY)


def _check_owner(by: Any, owner_id: Any) -> None:
    """A member acts on their own schedules only (the API never shows them others')."""
    if by is not None and not is_operator(by) and owner_id != getattr(by, "pk", None):
        raise ScheduleNotAllowed(NOT_YOURS)


def _is_member(user: Any) -> bool:
    return user is not None and not is_operator(user)


def check_member_timing(by: Any, cron: str, every: timedelta | None) -> None:
    """A member's schedule fires at most once a minute: ``every`` of at least a minute, and
    no seconds field in ``cron`` (``InvalidSchedule``). Operators and the trusted caller
    schedule as often as they like."""
    if not _is_member(by):
        return
    if every is not None and every < MEMBER_MIN_INTERVAL:
        raise InvalidSchedule(
            f"every={every.total_seconds():g}s: a member's schedule fires at most once a "
            'minute. Use "1m" or more, or ask an operator for a faster one.',
            field="every",
        )
    if cron and len(cron.split()) > 5:
        raise InvalidSchedule(
            "A member's schedule fires at most once a minute: write cron with 5 fields (no "
            'seconds field), e.g. "*/5 * * * *", or ask an operator for a faster one.',
            field="cron",
        )


def _check_member_count(by: Any, owner_id: Any, alias: str) -> None:
    """A member owns at most ``JOBS["MEMBER_SCHEDULES"]`` schedules. Called in the transaction
    that adds one: the owner's rows are locked first (PostgreSQL), so two additions at once
    are counted one after the other."""
    limit = jobs_settings.MEMBER_SCHEDULES
    if limit is None or not _is_member(by):
        return
    owned = Schedule.objects.using(alias).select_for_update().filter(owner_id=owner_id)
    count = len(owned.values_list("pk", flat=True))
    if count >= limit:
        raise InvalidSchedule(
            f'You own {count} schedules, the most a member may (JOBS["MEMBER_SCHEDULES"] is '
            f"{limit}). Delete one you no longer need, or ask an operator."
        )


def owner_refusal(owner: Any, handle: JobHandle) -> str | None:
    """Why ``owner`` may no longer have ``handle`` fired for them; ``None`` if they may.

    The scheduler asks before each firing of an owned schedule: a scheduled job is admitted
    like a submitted one, and the schedule pauses itself with this reason."""
    if not getattr(owner, "is_active", True):
        return "Paused: its owner's account is inactive. Reactivate it, or delete the schedule."
    if not can_schedule(owner, handle):
        return (
            f"Paused: its owner may no longer schedule {handle.kind!r}. An operator may change "
            "the kind's rights or the owner's; then enable the schedule again."
        )
    return None


_FIELD_CHECKS: dict[str, Callable[[Any], Any]] = {
    "name": check_name,
    "cron": lambda value: "" if value is None or value == "" else check_cron(value),
    "every": check_every,
    "tz": check_tz,
    "catch_up": check_catch_up,
    "enabled": _check_enabled,
    "queue": check_queue,
    "priority": check_priority,
    "expires": check_expires,
}


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
    _check_owner(by, owner_id)
    _check_options(by, {"queue": queue, "priority": priority})
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
        "enabled": _check_enabled(enabled),
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
    _check_owner(by, schedule.owner_id)
    _check_options(by, changes)
    values = {name: _FIELD_CHECKS.get(name, _same)(value) for name, value in changes.items()}
    if {"cron", "every"} & set(values):
        # Exactly one of them after the change: switching means clearing the other one.
        values["cron"], values["every"] = check_timing(
            values.get("cron", schedule.cron), values.get("every", schedule.every)
        )
        check_member_timing(by, values["cron"], values["every"])
    if "owner" in values:
        values["owner_id"] = getattr(values.pop("owner"), "pk", changes["owner"])
        _check_owner(by, values["owner_id"])
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
    _check_owner(by, schedule.owner_id)
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
    _check_owner(by, schedule.owner_id)
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
                _check_member_count(by, schedule.owner_id, alias)
            schedule.save(using=alias, update_fields=update_fields)
    except IntegrityError:
        # Names are unique per owner: this names only the owner's own schedules.
        mine = by is not None and schedule.owner_id == getattr(by, "pk", None)
        whose = "You already have" if mine else "Its owner already has"
        raise InvalidSchedule(
            f"{whose} a schedule with this name; pick another.", field="name"
        ) from None


# --- declared in code -----------------------------------------------------------------------

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
