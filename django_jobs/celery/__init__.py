"""Celery's API, one import away: ``from django_jobs.celery import shared_task`` (and ``Task``,
``Celery``, ``chain``, ``group``, ``chord``, ``signature``, ``crontab``, ``AsyncResult``,
``states``, ``exceptions``) instead of Celery's, and the task bodies, their options, their call
sites and the beat schedule stay as written and mean what Celery's documentation says.

A layer over the engine, not a second one: each task is a kind (the admin, the API, the
events and ``manage.py jobs`` show it like any other), its calls are jobs, its retries the
engine's attempts, its result the job's row. What cannot keep Celery's meaning is refused
where it is written (an option at import, a call's argument at the call), naming the native
way. docs/migrating-from-celery.md starts here.

    registration  shared_task: function -> Task -> kind, and the runner of each attempt
    task          Task: request, retry, delay/apply_async, update_state, the handlers
    calls         apply_async -> one job     result   AsyncResult over the job row
    canvas        s/si, chain, group, chord  beat     crontab, beat_schedule -> schedules
    codec         Celery's JSON (datetime, Decimal, UUID...)
    policy        the engine's retry policy of a task; Celery's backoff
    options       the decorator's options: honoured, or refused with the native way
    exceptions    celery.exceptions' names     states   celery.states' names
    app           Celery(...), current_app, autodiscover_tasks
"""

from __future__ import annotations

from . import exceptions, schedules, states
from .app import Celery, current_app
from .beat import crontab, schedule
from .canvas import Signature, chain, chord, group, signature
from .names import current_task
from .registration import shared_task
from .result import AsyncResult
from .task import Task


def __getattr__(name: str) -> object:
    """Any other name of Celery's top-level API: not here, and said so where it is imported."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(
        f"celery.{name} is not part of django_jobs.celery, which offers {', '.join(__all__)}. "
        "The native way for the rest: docs/migrating-from-celery.md."
    )


__all__ = [
    "AsyncResult",
    "Celery",
    "Signature",
    "Task",
    "chain",
    "chord",
    "crontab",
    "current_app",
    "current_task",
    "exceptions",
    "group",
    "schedule",
    "schedules",
    "shared_task",
    "signature",
    "states",
]
