"""``delay`` and ``apply_async``: one run of a task enqueued as one job, in the caller's
transaction (no ``transaction.on_commit`` needed: a rolled-back enqueue leaves no job).

The arguments are the job's payload, ``{"args": [...], "kwargs": {...}}`` in Celery's JSON
(``codec``). Every call is a job of its own; ``task_id=`` is the job's idempotency key, so a
second call with the same ``task_id`` while the first is queued or running returns the first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import clock
from .codec import encode
from .names import job_priority
from .options import SHARED_REFUSALS, serializer_refusal

if TYPE_CHECKING:
    from .names import TaskLike as Task
    from .result import AsyncResult

#: ``apply_async`` options with nothing to do here, whose meaning holds anyway: the insert
#: commits with the caller or raises (no broker publish to retry), and a job started from a
#: task already knows its parent.
ACCEPTED = ("retry", "retry_policy", "add_to_parent", "serializer")

#: ``apply_async`` options whose meaning cannot be kept: each refused with the native way.
REFUSED = {
    **SHARED_REFUSALS,
    "headers": "message headers are for a broker and none reads them here (a job is a row: no "
    "SQS MessageGroupId, no header routing, no self.request.headers); pass what the task needs "
    "as one of its kwargs and leave headers= out",
    "connection": "a job is enqueued on the database connection of JOBS['DATABASE']",
    "producer": "a job is enqueued on the database connection of JOBS['DATABASE']",
    "time_limit": "set time_limit on the task (@shared_task(time_limit=...))",
    "soft_time_limit": "set soft_time_limit on the task (@shared_task(soft_time_limit=...))",
    "ignore_result": "set ignore_result on the task (@shared_task(ignore_result=True))",
    "shadow": "the job's kind is the task's name; a label per call is not kept",
}


def refusal(option: str, value: Any) -> str | None:
    """Why ``apply_async(option=value)`` is refused, with the native way; None if it is not."""
    if option == "serializer":
        return serializer_refusal(value)
    if option in ACCEPTED:
        return None
    if option in REFUSED:
        return f"{option}=: {REFUSED[option]}"
    return f"{option}= is not an apply_async option here"


def aware(value: datetime) -> datetime:
    """A naive ``eta``/``expires`` is UTC, as Celery reads it (``maybe_make_aware``)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def enqueue(
    task: Task,
    args: Any,
    kwargs: Any,
    *,
    countdown: float | None,
    eta: datetime | None,
    expires: float | timedelta | datetime | None,
    queue: str | None,
    priority: int | None,
    task_id: str | None,
    link: Any,
    link_error: Any,
    options: dict[str, Any],
    parent: int | None = None,
) -> AsyncResult:
    from .result import AsyncResult

    for option, value in options.items():
        why = refusal(option, value)
        if why is not None:
            raise NotImplementedError(f"{task.name}.apply_async({why}.")
    if args is not None and not isinstance(args, (list, tuple)):
        raise TypeError(f"{task.name}.apply_async: args must be a list or a tuple, not {args!r}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"{task.name}.apply_async: kwargs must be a dict, not {kwargs!r}")
    args, kwargs = list(args or ()), dict(kwargs or {})
    task.check_arguments(args, kwargs)
    if link is not None:
        from .canvas import linked

        return linked(task, args, kwargs, link=link, link_error=link_error)
    now = clock.now()
    run_at = aware(eta) if eta is not None else None
    if run_at is None and countdown is not None:
        run_at = now + timedelta(seconds=float(countdown))
    expires = task.expires if expires is None else expires
    expires_at: datetime | None = None
    if isinstance(expires, datetime):
        expires_at = aware(expires)
    elif isinstance(expires, timedelta):
        expires_at = now + expires
    elif expires is not None:
        expires_at = now + timedelta(seconds=float(expires))  # from the call, as Celery's
    payload: dict[str, Any] = {"args": encode(args), "kwargs": encode(kwargs)}
    if link_error is not None:
        from .canvas import errbacks

        payload["link_error"] = errbacks(link_error)
    job = task.handle.enqueue(
        payload,
        queue=queue,
        priority=job_priority(priority if priority is not None else task.priority),
        run_at=run_at,
        idempotency_key=task_id,
        expires=expires_at,
    )
    return AsyncResult.of(job, task_id=task_id)
