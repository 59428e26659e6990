"""Schedules: the rows that enqueue a kind on a cron or an interval, and the tick that fires them.

    service.py       every change to a ``Schedule`` row (API, admin, CLI), its next run
    checks.py        every check of one: its fields, its kind and payload, who may
    declarations.py  ``schedule(...)`` in code, and the sync of the declared rows
    cron.py          cron arithmetic in real time zones (croniter + zoneinfo)
    scheduler.py     the tick a worker runs: due rows -> jobs, under an advisory lock

``django_jobs.engine.schedules.create(...)`` and the other names below are documented paths:
they are imported from here.
"""

from __future__ import annotations

from .checks import (
    KIND_NOT_ALLOWED,
    MEMBER_MIN_INTERVAL,
    NAME_LENGTH,
    NOT_YOURS,
    OPERATOR_ONLY,
    PRIORITY_RANGE,
    check_catch_up,
    check_cron,
    check_every,
    check_expires,
    check_member_timing,
    check_name,
    check_payload,
    check_priority,
    check_queue,
    check_timing,
    check_tz,
    owner_refusal,
    schedulable,
)
from .cron import CATCH_UP_CHOICES
from .declarations import (
    ScheduleHandle,
    declared,
    schedule,
    sync_declared,
    undeclare,
    validate_schedule,
)
from .service import (
    EDITABLE,
    EVERY_TZ,
    OPTIONS,
    create,
    delete,
    delete_many,
    next_run,
    next_run_or_none,
    pause,
    pause_many,
    resume,
    upcoming,
    upcoming_of,
    update,
)

__all__ = [
    "CATCH_UP_CHOICES",
    "EDITABLE",
    "EVERY_TZ",
    "KIND_NOT_ALLOWED",
    "MEMBER_MIN_INTERVAL",
    "NAME_LENGTH",
    "NOT_YOURS",
    "OPERATOR_ONLY",
    "OPTIONS",
    "PRIORITY_RANGE",
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
