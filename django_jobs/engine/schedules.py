"""``schedule(...)``: declare a cron schedule in code; it is synced to a ``Schedule`` row."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import clock
from ..exceptions import InvalidSchedule
from ..registry import JobHandle
from ..validation import key_problem
from ..validation import storable_json as ensure_json
from .cron import CATCH_UP_CHOICES, next_runs, validate_cron, validate_tz

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

    def next_runs(self, n: int = 5, after: datetime | None = None) -> list[datetime]:
        """The next ``n`` occurrences strictly after ``after`` (default now), aware UTC."""
        return next_runs(self.cron, self.tz, after or clock.now(), n)


def validate_schedule(
    *, name: str, cron: str, tz: str | None, kind: str, payload: Any, catch_up: str
) -> str:
    """Check every part of a schedule; return the normalized cron. Raises ``InvalidSchedule``."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidSchedule("A schedule needs a name: a non-empty string, unique per project.")
    if key_problem(name):
        raise InvalidSchedule(f"Schedule name {name!r}: {key_problem(name)}")
    normalized = validate_cron(cron)
    validate_tz(tz)
    if catch_up not in CATCH_UP_CHOICES:
        raise InvalidSchedule(
            f"catch_up={catch_up!r}: use one of {', '.join(repr(c) for c in CATCH_UP_CHOICES)}."
        )
    try:
        ensure_json(payload, what=f"payload of schedule {name!r}")
    except ValueError as exc:
        raise InvalidSchedule(str(exc)) from exc
    if not kind:
        raise InvalidSchedule(f"Schedule {name!r} needs job=: a @job handle or a kind name.")
    return normalized


def schedule(
    name: str,
    *,
    cron: str,
    tz: str | None = None,
    job: JobHandle | str,
    payload: Any = None,
    catch_up: str = "skip",
) -> ScheduleHandle:
    """Declare a cron schedule firing ``job`` with ``payload`` at wall-clock times in ``tz``."""
    kind = job.kind if isinstance(job, JobHandle) else str(job)
    normalized = validate_schedule(
        name=name, cron=cron, tz=tz, kind=kind, payload=payload, catch_up=catch_up
    )
    handle = ScheduleHandle(
        name=name, cron=normalized, tz=str(tz), kind=kind, payload=payload, catch_up=catch_up
    )
    with _lock:
        _declared[name] = handle
    return handle


def declared() -> list[ScheduleHandle]:
    return sorted(_declared.values(), key=lambda h: h.name)


def undeclare(name: str) -> None:
    with _lock:
        _declared.pop(name, None)
