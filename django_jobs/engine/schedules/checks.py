"""Every check of a schedule: its fields one by one, its kind and payload, and who may.

* **Fields.** ``check_name``, ``check_cron``, ``check_every``, ``check_tz``,
  ``check_catch_up``, ``check_queue``, ``check_priority``, ``check_expires``,
  ``check_payload`` and ``schedulable`` judge one field each (``check_timing``: exactly one of
  cron and every); the API's serializer and the
  admin's form call them per field (so they can list every bad field at once), and ``create``
  and ``update`` (``engine.schedules.service``) call them again on whatever reaches them.
* **Who may.** ``by`` is the user asking, as the API passes its caller: a member may schedule
  only kinds that are member-safe and schedulable, only for themselves, never with a queue
  or a priority of their own (as on submit), and may always pause what they own.
  ``by=None`` is the trusted caller: code, the admin (operators only) and ``manage.py``,
  which act as the deployment. ``owner_refusal`` is the same rule as the
  scheduler applies it before each firing.

Errors say what to do next: ``InvalidSchedule`` (``.field`` names the field at fault),
``InvalidPayload`` (``PayloadTooLarge`` past ``JOBS["MAX_PAYLOAD_BYTES"]``) and
``ScheduleNotAllowed``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from ...conf import jobs_settings
from ...exceptions import InvalidDuration, InvalidPayload, InvalidSchedule, ScheduleNotAllowed
from ...kinds.handle import JobHandle
from ...kinds.registry import all_handles, get
from ...models import Schedule
from ...permissions import can_schedule, is_operator
from ...store import get_store
from ...validation import check_label, storable_payload
from ..rows.admission import captured_at_admission, expires_span
from . import cron as cron_rules
from .cron import CATCH_UP_CHOICES

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


def check_enabled(value: Any) -> bool:
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


def check_options(by: Any, values: Mapping[str, Any]) -> None:
    """Queue and priority are the operators' (a member's submit may not set them either)."""
    if by is None or is_operator(by):
        return
    if values.get("queue") is not None or values.get("priority") is not None:
        raise ScheduleNotAllowed(OPERATOR_ONLY)


def check_owner(by: Any, owner_id: Any) -> None:
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


def check_member_count(by: Any, owner_id: Any, alias: str) -> None:
    """A member owns at most ``JOBS["MEMBER_SCHEDULES"]`` schedules. Called first in the
    transaction that adds one: the owner's lock (``Store.lock_owner``) is taken before the
    count and held until the commit, so additions sent at once are counted one after the
    other. Locking the owner's rows would not do: a member who owns none has none to lock."""
    limit = jobs_settings.MEMBER_SCHEDULES
    if limit is None or not _is_member(by):
        return
    get_store(alias).lock_owner(owner_id)
    count = Schedule.objects.using(alias).filter(owner_id=owner_id).count()
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


FIELD_CHECKS: dict[str, Callable[[Any], Any]] = {
    "name": check_name,
    "cron": lambda value: "" if value is None or value == "" else check_cron(value),
    "every": check_every,
    "tz": check_tz,
    "catch_up": check_catch_up,
    "enabled": check_enabled,
    "queue": check_queue,
    "priority": check_priority,
    "expires": check_expires,
}
