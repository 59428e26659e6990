"""``celery.signals``: none is sent here, so each is refused where it is imported, with the
native way (a receiver connected to a signal that never fires would be a silent no-op)."""

from __future__ import annotations

#: Celery's signal -> what to use instead.
NATIVE = {
    "task": "connect to django_jobs.signals.job_event (type job.started, job.succeeded, "
    "job.failed, job.retrying, ...)",
    "worker": "a worker process runs Django's AppConfig.ready() at its start: set up there",
    "setup_logging": "runjobs logs through Django's LOGGING setting: configure it there",
    "after_setup_logger": "runjobs logs through Django's LOGGING setting: configure it there",
    "after_setup_task_logger": "runjobs logs through Django's LOGGING setting: configure it there",
}


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    why = (
        NATIVE.get(name)
        or NATIVE.get(name.split("_")[0])
        or ("connect to django_jobs.signals.job_event, or set up in AppConfig.ready()")
    )
    raise NotImplementedError(
        f"celery.signals.{name} is not sent by django_jobs.celery: {why} "
        "(docs/migrating-from-celery.md)."
    )
