"""The runner of the ``django.tasks`` kinds: one attempt of one Django task.

It records the attempt (worker id, start), sends ``task_started``, calls the task (with a
``TaskContext`` when it takes one), and either returns the JSON return value (the job succeeds)
or records the error and re-raises it, so the engine's retry policy decides what follows.
``task_finished`` is sent once the task will not run again: on success, or on a failure that
leaves no retry.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.dispatch import Signal

from .. import clock
from ..conf import jobs_settings
from ..exceptions import Blocked, Cancelled, Uncertain, Unrecoverable
from ..validation import storable_json as ensure_json
from .compat import (
    DEFAULT_TASK_BACKEND_ALIAS,
    BaseTaskBackend,
    TaskContext,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .results import ATTEMPT, ERROR, History, build_result, error_record, rebuild_task

if TYPE_CHECKING:
    from ..engine.run.context import JobContext
    from ..models import Job

logger = logging.getLogger("django_jobs.tasks")


def run_task(ctx: JobContext) -> Any:
    """Run the Django task stored in ``ctx.payload`` as this job's current attempt."""
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    alias = str(payload.get("backend") or DEFAULT_TASK_BACKEND_ALIAS)
    try:
        backend = task_backends[alias]
    except ImproperlyConfigured as exc:
        raise Blocked(
            f"TASKS has no usable backend {alias!r} in this deployment ({exc}). Configure it, "
            "then retry the job; or cancel it."
        ) from exc
    # JobsBackend (and only it and its subclasses) says so; it registers this function.
    if getattr(backend, "runs_tasks_as_jobs", False) is not True:
        raise Blocked(
            f"TASKS[{alias!r}] is {type(backend).__name__} here, not JobsBackend. Point it at "
            "django_jobs.tasks.JobsBackend, then retry the job; or cancel it."
        )
    return execute(backend, ctx)


def execute(backend: BaseTaskBackend, ctx: JobContext) -> Any:
    # The backend is JobsBackend (run_task checked), typed by its base: backend.py imports this.
    job = ctx.job
    alias = jobs_settings.DATABASE
    history = History.load(job.pk, alias)
    started = clock.now()
    history.record(
        job,
        alias,
        f"{ATTEMPT}{job.attempts}",
        {"worker_id": job.worker_id or "", "started_at": started.isoformat()},
    )
    try:
        task = rebuild_task(ctx.payload)
    except Exception as exc:  # gone, or no longer valid for its backend
        history.record(job, alias, f"{ERROR}{job.attempts}", error_record(exc, clock.now()))
        reason = (
            str(exc)
            if isinstance(exc, ImportError)
            else (
                f"The task can no longer be rebuilt for its backend ({type(exc).__name__}: {exc}). "
                "Fix the task or the TASKS setting, then retry the job; or cancel it."
            )
        )
        raise Blocked(reason) from exc

    result = build_result(task, job, history, status=TaskResultStatus.RUNNING)
    sender = type(backend)
    _send(task_started, sender, result)
    try:
        if task.takes_context:
            raw = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            raw = task.call(*result.args, **result.kwargs)
        value = normalize_json(raw)
        ensure_json(value, what="task's return value")
    except KeyboardInterrupt:
        raise  # as Django's own backends do: only an interrupt propagates
    except BaseException as exc:  # SystemExit too: the task failed, the worker goes on
        now = clock.now()
        record = error_record(exc, now)
        history.record(job, alias, f"{ERROR}{job.attempts}", record)
        if _final(exc, job):
            result.errors[:] = history.task_errors()
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", now)
            _send(task_finished, sender, result)  # inside except: receivers see exc_info
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", clock.now())
    object.__setattr__(result, "_return_value", value)
    _send(task_finished, sender, result)
    return value


def _final(exc: BaseException, job: Job) -> bool:
    """Is this the task's last run? True unless the engine will retry the job after ``exc``."""
    if isinstance(exc, Blocked | Uncertain | Unrecoverable | Cancelled):
        return True
    return job.attempts >= job.max_attempts


def _send(signal: Signal, sender: type, result: TaskResult) -> None:
    """Send a worker-side signal; a failing receiver is logged and never fails the task."""
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "Receiver %r of a Django tasks signal failed for task %s: %s",
                receiver,
                result.id,
                response,
                exc_info=response,
            )
