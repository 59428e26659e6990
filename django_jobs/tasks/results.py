"""A Django ``TaskResult`` rebuilt from a job row and the attempt records kept in its steps.

The job row already holds what the engine knows (state, timestamps, the return value as
``result``). What Django's ``TaskResult`` needs beyond that, one worker id per attempt and one
``TaskError`` (exception class path and traceback) per failed attempt, is kept as completed
steps of the job, so nothing changes in the tables:

- ``attempt-N``: ``{"worker_id", "started_at"}``, written when attempt N starts;
- ``error-N``: ``{"exception_class_path", "traceback", "at"}``, written when attempt N raised.

They show in the job's steps trace like any step, and an operator retry keeps them (attempt
numbers never repeat within a job, so neither do the names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from ..models import JobStep
from ..states import JobState, StepState
from .compat import Task, TaskError, TaskResult, TaskResultStatus

if TYPE_CHECKING:
    from ..models import Job

ATTEMPT = "attempt-"
ERROR = "error-"
_NAME = re.compile(r"^(attempt|error)-(\d+)$")
TRACEBACK_CAP = 16_000

#: Job state -> Django's TaskResultStatus. A job that will not run again on its own (blocked,
#: unknown, cancelled) is FAILED: "unable to start" or stopped, in Django's words.
STATUS: dict[str, TaskResultStatus] = {
    JobState.QUEUED: TaskResultStatus.READY,
    JobState.WAITING: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.BLOCKED: TaskResultStatus.FAILED,
    JobState.UNKNOWN: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}

#: For a FAILED job whose last attempt left no error record (cancelled before it ran, stopped
#: by the engine, or its worker died), the TaskError names the engine's reason.
ENGINE_ERRORS: dict[str, str] = {
    JobState.CANCELLED: "django_jobs.exceptions.Cancelled",
    JobState.BLOCKED: "django_jobs.exceptions.Blocked",
    JobState.UNKNOWN: "django_jobs.exceptions.Uncertain",
    JobState.FAILED: "django_jobs.exceptions.JobsError",
}


@dataclass
class History:
    """The attempt and error records of one job, by attempt number."""

    attempts: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: dict[int, dict[str, Any]] = field(default_factory=dict)
    rows: int = 0

    @classmethod
    def load(cls, job_id: int, alias: str) -> History:
        history = cls()
        for name, value in (
            JobStep.objects.using(alias).filter(job_id=job_id).values_list("name", "value")
        ):
            history.rows += 1
            match = _NAME.match(name)
            if match is None or not isinstance(value, dict):
                continue
            target = history.attempts if match.group(1) == "attempt" else history.errors
            target[int(match.group(2))] = value
        return history

    def record(self, job: Job, alias: str, name: str, value: dict[str, Any]) -> None:
        """Save one record as a completed step of ``job`` (one INSERT)."""
        at = parse_datetime(value.get("at") or value.get("started_at") or "")
        number = int(name.rsplit("-", 1)[1])
        target = self.attempts if name.startswith(ATTEMPT) else self.errors
        if number in target:  # the same attempt ran again without being counted: overwrite
            JobStep.objects.using(alias).filter(job_id=job.pk, name=name).update(
                value=value, started_at=at, ended_at=at
            )
            target[number] = value
            return
        JobStep.objects.using(alias).create(
            job_id=job.pk,
            name=name,
            seq=self.rows,
            key=f"{job.kind}:{job.pk}:{name}",
            state=StepState.COMPLETED,
            value=value,
            attempts=1,
            started_at=at,
            ended_at=at,
        )
        self.rows += 1
        target[number] = value

    def worker_ids(self) -> list[str]:
        return [str(self.attempts[n].get("worker_id") or "") for n in sorted(self.attempts)]

    def task_errors(self) -> list[TaskError]:
        return [
            TaskError(
                exception_class_path=str(self.errors[n].get("exception_class_path") or ""),
                traceback=str(self.errors[n].get("traceback") or ""),
            )
            for n in sorted(self.errors)
        ]

    def started_at(self, *, last: bool = False) -> datetime | None:
        """When the first (or the ``last``) recorded attempt started."""
        if not self.attempts:
            return None
        number = max(self.attempts) if last else min(self.attempts)
        return parse_datetime(str(self.attempts[number].get("started_at") or ""))


def error_record(exc: BaseException, at: datetime) -> dict[str, Any]:
    """The ``error-N`` record of an exception, as Django's TaskError describes it."""
    from traceback import format_exception

    cls = type(exc)
    trace = "".join(format_exception(exc))
    if len(trace) > TRACEBACK_CAP:
        trace = "[…]\n" + trace[-TRACEBACK_CAP:]
    return {
        "exception_class_path": f"{cls.__module__}.{cls.__qualname__}",
        "traceback": trace,
        "at": at.isoformat(),
    }


def task_payload(task: Task, args: Any, kwargs: Any) -> dict[str, Any]:
    """The job payload of one enqueue: what the worker needs to rebuild and call the task."""
    return {
        "task": task.module_path,
        "args": args,
        "kwargs": kwargs,
        "backend": task.backend,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": task.run_after.isoformat() if task.run_after else None,
    }


def rebuild_task(payload: dict[str, Any]) -> Task:
    """The ``Task`` of a payload, with the options it was enqueued with.

    Raises ``ImportError`` when the task's module path no longer names a ``Task``.
    """
    path = payload.get("task")
    if not isinstance(path, str) or not path:
        raise ImportError("The job's payload names no task (its 'task' key is missing).")
    try:
        found = import_string(path)
    except ImportError as exc:
        raise ImportError(
            f"Task {path!r} cannot be imported ({exc}). Deploy the code that defines it, "
            "then retry the job; or cancel it."
        ) from exc
    if not isinstance(found, Task):
        raise ImportError(
            f"{path!r} is not a task (found {type(found).__name__}); decorate it with @task, "
            "then retry the job; or cancel it."
        )
    run_after = payload.get("run_after")
    return replace(
        found,
        priority=int(payload.get("priority") or 0),
        queue_name=str(payload.get("queue_name") or found.queue_name),
        run_after=parse_datetime(run_after) if run_after else None,
        backend=str(payload.get("backend") or found.backend),
    )


def build_result(
    task: Task, job: Job, history: History, *, status: TaskResultStatus | None = None
) -> TaskResult:
    """The ``TaskResult`` of ``job`` as stored (or with ``status`` while it runs)."""
    payload = job.payload or {}
    status = status or STATUS.get(job.state, TaskResultStatus.READY)
    errors = history.task_errors()
    if status == TaskResultStatus.FAILED and job.attempts not in history.errors:
        errors.append(
            TaskError(
                exception_class_path=ENGINE_ERRORS.get(job.state, ENGINE_ERRORS[JobState.FAILED]),
                traceback=job.error or f"The job is {job.state}.",
            )
        )
    ran = job.attempts > 0 or bool(history.attempts)
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    finished_at = job.ended_at
    if finished and finished_at is None and job.attempts in history.errors:
        finished_at = parse_datetime(str(history.errors[job.attempts].get("at") or ""))
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.pk),
        status=status,
        enqueued_at=job.created_at,
        started_at=history.started_at() or (job.started_at if ran else None),
        finished_at=finished_at if finished else None,
        last_attempted_at=history.started_at(last=True) or (job.started_at if ran else None),
        args=list(payload.get("args") or []),
        kwargs=dict(payload.get("kwargs") or {}),
        backend=str(payload.get("backend") or task.backend),
        errors=errors,
        worker_ids=history.worker_ids(),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result
