"""Celery beat's schedule as schedules: ``crontab(...)``, and the entries of
``app.conf.beat_schedule`` / ``CELERY_BEAT_SCHEDULE``, declared when Django is ready.

An entry ``{"task": name, "schedule": crontab(...) | timedelta | seconds, "args": (...),
"kwargs": {...}, "options": {"queue", "priority", "expires"}}`` becomes the declared schedule
of that name: a crontab fires at its wall-clock times in ``CELERY_TIMEZONE`` (``timezone`` of
the app's conf; UTC without one), an interval every so many seconds (counted from the Unix
epoch, not from the scheduler's start: docs/migrating-from-celery.md). The scheduler is the
worker's own: no ``celery beat`` process to run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .codec import encode
from .names import job_priority, task_names


class crontab:  # noqa: N801 - Celery's name
    """``crontab(minute=, hour=, day_of_week=, day_of_month=, month_of_year=)``: Celery's
    fields as a cron expression (the same syntax: ``*/15``, ``1-5``, ``mon,fri``)."""

    def __init__(
        self,
        minute: str | int = "*",
        hour: str | int = "*",
        day_of_week: str | int = "*",
        day_of_month: str | int = "*",
        month_of_year: str | int = "*",
        **kwargs: Any,
    ) -> None:
        unknown = set(kwargs) - {"nowfun", "app"}
        if unknown:
            raise TypeError(f"crontab() got unexpected arguments: {', '.join(sorted(unknown))}")
        self.minute, self.hour = _field(minute), _field(hour)
        self.day_of_week, self.day_of_month = _field(day_of_week), _field(day_of_month)
        self.month_of_year = _field(month_of_year)

    @property
    def cron(self) -> str:
        """The five-field cron expression: minute hour day-of-month month day-of-week."""
        return " ".join(
            (self.minute, self.hour, self.day_of_month, self.month_of_year, self.day_of_week)
        )

    def __repr__(self) -> str:
        return f"<crontab: {self.cron}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, crontab) and other.cron == self.cron

    def __hash__(self) -> int:
        return hash(self.cron)


def _field(value: str | int | Any) -> str:
    if isinstance(value, bool):
        raise TypeError(f"crontab field {value!r}: pass a number or cron text.")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (set, list, tuple, range)):
        return ",".join(str(v) for v in sorted(value))
    return str(value).replace(" ", "")


class schedule:  # noqa: N801 - Celery's name
    """``schedule(run_every=timedelta(...))``: an interval, as ``celery.schedules.schedule``."""

    def __init__(self, run_every: timedelta | float, **kwargs: Any) -> None:
        self.run_every = run_every


def entry_schedule(name: str, entry: dict[str, Any], tz: str) -> dict[str, Any]:
    """The arguments of ``schedule(...)`` for one beat entry."""
    if not isinstance(entry, dict) or "task" not in entry or "schedule" not in entry:
        raise ValueError(
            f"beat_schedule[{name!r}]: an entry needs 'task' (the task's name) and 'schedule' "
            "(crontab(...), a timedelta or seconds)."
        )
    when = entry["schedule"]
    if isinstance(when, schedule):
        when = when.run_every
    timing: dict[str, Any]
    if isinstance(when, crontab):
        timing = {"cron": when.cron, "tz": tz}
    elif isinstance(when, timedelta):
        timing = {"every": when}
    elif isinstance(when, (int, float)) and not isinstance(when, bool):
        timing = {"every": timedelta(seconds=float(when))}
    else:
        raise NotImplementedError(
            f"beat_schedule[{name!r}]: schedule={when!r} is not a crontab, a timedelta or "
            "seconds; a solar or custom schedule has no counterpart: write a cron (with a "
            "zone) or an interval, or a native @job that decides each day (schedule(...))."
        )
    task = entry["task"]
    if task not in task_names():
        raise ValueError(
            f"beat_schedule[{name!r}]: task {task!r} is not a registered task; import its "
            "module (app.autodiscover_tasks()), or check its name."
        )
    options = dict(entry.get("options") or {})
    if options.get("priority") is not None:
        options["priority"] = job_priority(options["priority"])
    unknown = set(options) - {"queue", "priority", "expires"}
    if unknown:
        raise NotImplementedError(
            f"beat_schedule[{name!r}] options {sorted(unknown)}: a schedule's jobs take "
            "queue, priority and expires; set the others on the task."
        )
    return {
        "name": name,
        "job": task,
        "payload": {
            "args": encode(list(entry.get("args") or ())),
            "kwargs": encode(dict(entry.get("kwargs") or {})),
        },
        **timing,
        **options,
    }


def declare(entries: dict[str, Any], tz: str | None) -> list[Any]:
    """Declare each beat entry as a schedule (``django_jobs.schedule``)."""
    from ..engine.schedules import schedule as declare_schedule

    return [
        declare_schedule(**entry_schedule(name, entry, tz or "UTC"))
        for name, entry in entries.items()
    ]


def install() -> None:
    """``JobsConfig.ready()``: each app's ``conf.beat_schedule`` and the settings'
    ``CELERY_BEAT_SCHEDULE``, declared once the tasks are imported."""
    from django.conf import settings

    from .app import apps_made

    seen: dict[str, Any] = {}
    tz = getattr(settings, "CELERY_TIMEZONE", None)
    for app in apps_made():
        seen.update(app.conf.get("beat_schedule") or {})
        tz = app.conf.get("timezone") or tz
    seen.update(getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {})
    if seen:
        declare(seen, tz)
