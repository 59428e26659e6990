"""A ``base=`` Task's handlers as the kind's hooks: ``on_success``, ``on_failure``,
``on_retry`` and then ``after_return``, with Celery's arguments, once the outcome is recorded.

Only the handlers a class overrides become hooks, so a task without any costs nothing. A
handler that raises is logged and changes nothing, as the engine's hooks (the outcome stands).
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from ..kinds.hooks import Hooks
from . import states
from .codec import arguments, decode
from .names import task_id_of

if TYPE_CHECKING:
    from ..models import Job

HANDLERS = ("on_success", "on_failure", "on_retry", "after_return")

logger = logging.getLogger("django_jobs.hooks")


class ExceptionInfo:
    """Celery's ``einfo``: the exception, its type and its traceback as text."""

    def __init__(self, exception: BaseException | None, traceback: str = "") -> None:
        self.exception = exception
        self.type = type(exception) if exception is not None else None
        self.traceback = traceback

    def __str__(self) -> str:
        return self.traceback


def _overrides(task: Any, base: type, name: str) -> bool:
    return getattr(type(task), name) is not getattr(base, name)


def _call(job: Job) -> tuple[str, list[Any], dict[str, Any]]:
    args, kwargs = arguments(job.payload)
    return task_id_of(job), args, kwargs


def _einfo(job: Job, exc: BaseException | None) -> ExceptionInfo:
    return ExceptionInfo(exc, job.error or "")


def hooks_of(task: Any, base: type) -> Hooks:
    """The kind's ``Hooks``: the handlers ``task``'s class overrides (of ``base``, the plain
    ``Task``), and, on a failure, the errbacks its call was given (``link_error``)."""
    overridden = {name for name in HANDLERS if _overrides(task, base, name)}
    after = "after_return" in overridden

    def on_success(job: Job, exc: BaseException | None) -> None:
        task_id, args, kwargs = _call(job)
        value = decode(job.result)
        task.on_success(value, task_id, args, kwargs)
        if after:
            task.after_return(states.SUCCESS, value, task_id, args, kwargs, None)

    def on_failure(job: Job, exc: BaseException | None) -> None:
        task_id, args, kwargs = _call(job)
        einfo = _einfo(job, exc)
        if overridden:
            task.on_failure(exc, task_id, args, kwargs, einfo)
            if after:
                task.after_return(states.FAILURE, exc, task_id, args, kwargs, einfo)
        payload = job.payload if isinstance(job.payload, dict) else {}
        if payload.get("link_error"):
            call_errbacks(payload["link_error"], job, exc, einfo)

    def on_retry(job: Job, exc: BaseException | None) -> None:
        task_id, args, kwargs = _call(job)
        reason = getattr(exc, "exc", None) or exc  # a Retry carries what it was asked for
        einfo = _einfo(job, reason)
        task.on_retry(reason, task_id, args, kwargs, einfo)
        if after:
            task.after_return(states.RETRY, reason, task_id, args, kwargs, einfo)

    return Hooks(
        on_success=on_success if overridden else None,
        on_failure=on_failure,
        on_retry=on_retry if overridden else None,
    )


def call_errbacks(nodes: list[dict[str, Any]], job: Job, exc: Any, einfo: ExceptionInfo) -> None:
    """Celery's errbacks: one whose body takes ``(request, exc, traceback)`` is called here,
    in the worker, as Celery calls it; one that takes only the failed task's id is enqueued
    with it. One that raises is logged; the next still runs."""
    from .canvas import Signature
    from .request import Request

    task_id, args, kwargs = _call(job)
    request = Request(id=task_id, args=args, kwargs=kwargs, task=job.kind, job=job)
    for node in nodes:
        try:
            errback = Signature.described(node)
            if _takes_three(errback.task):
                errback(request, exc, einfo.traceback)
            else:
                errback.apply_async((task_id,))
        except Exception:
            logger.exception(
                "Errback %s of job %s raised; the job's outcome stands.", node.get("task"), job.pk
            )


def _takes_three(task: Any) -> bool:
    """Whether the errback's body can take ``(request, exc, traceback)`` (Celery's
    ``arity_greater(header, 1)``)."""
    function = getattr(type(task), "__wrapped__", None) or task.run
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    if getattr(task, "bound", False) and parameters:
        parameters = parameters[1:]
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) > 1 or any(p.kind == p.VAR_POSITIONAL for p in parameters)
