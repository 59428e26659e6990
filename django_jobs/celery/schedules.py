"""``celery.schedules``, at its own import path: ``from django_jobs.celery.schedules import
crontab`` (a Django project's settings write ``from celery.schedules import crontab``)."""

from __future__ import annotations

from .beat import crontab, schedule


def __getattr__(name: str) -> object:
    """``solar``, ``BaseSchedule`` and the rest: no counterpart, said where it is imported."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(
        f"celery.schedules.{name} is not part of django_jobs.celery, which offers crontab and "
        "schedule: write a cron (with a zone) or an interval, or a native @job that decides "
        "each run (docs/migrating-from-celery.md)."
    )


__all__ = ["crontab", "schedule"]
