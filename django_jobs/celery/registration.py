"""``shared_task``: a function becomes a Celery task, and the task a kind of the engine.

The kind is named as Celery names the task (``name=``, else ``module.function``). Its runner
reads the call's arguments from the payload, pushes the task's ``request``, runs the body
(``autoretry_for`` included) and returns its value in Celery's JSON. The task's options are
checked here, at import: one whose meaning cannot be kept is refused with the native way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..exceptions import Cancelled, RetryLater, Unrecoverable
from ..kinds.hooks import Hooks
from ..kinds.registry import get, job
from . import request as requests
from .codec import arguments, decode, encode
from .exceptions import Ignore, Reject, SoftTimeLimitExceeded
from .hooks import hooks_of
from .names import higher_runs_first, job_priority, register, registered, task_id_of
from .options import check_options
from .policy import TaskRetry
from .request import Request
from .task import Task


def shared_task(*args: Any, **options: Any) -> Any:
    """``@shared_task`` or ``@shared_task(**options)``: register the function as a task."""
    if len(args) == 1 and callable(args[0]) and not options:
        return create(args[0])
    if args:
        raise TypeError("shared_task takes its options as keywords: @shared_task(bind=True).")

    def decorator(function: Callable[..., Any]) -> Task:
        return create(function, **options)

    return decorator


def create(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    bind: bool = False,
    base: type[Task] | None = None,
    **options: Any,
) -> Task:
    base = base or default_base()
    if not (isinstance(base, type) and issubclass(base, Task)):
        raise TypeError(
            f"base={base!r}: pass a subclass of django_jobs.celery.Task (Celery's Task "
            "subclasses: change their import to django_jobs.celery)."
        )
    name = name or f"{function.__module__}.{function.__name__}"
    check_options(name, options)
    body = function if bind else staticmethod(function)
    attributes = {
        "name": name,
        "run": body,
        "bound": bind,
        "__doc__": function.__doc__,
        "__module__": function.__module__,
        "__wrapped__": staticmethod(function),
        "__qualname__": function.__qualname__,
        **options,
    }
    cls = type(function.__name__, (base,), attributes)
    instance: Task = cls()
    existing: Task | None = registered(name)
    if existing is not None and get(name) is not None:
        same = getattr(type(existing), "__wrapped__", None)
        if same is function or (
            getattr(same, "__module__", None) == function.__module__
            and getattr(same, "__qualname__", None) == function.__qualname__
        ):
            return existing  # the module imported again: the task it registered stands
    instance.handle = _register(instance)
    register(name, instance)
    return instance


def default_base() -> type[Task]:
    """The base of a task that names none: the ``task_cls`` of the project's ``Celery(...)``
    (``app.Task``), else ``Task``, as Celery's ``shared_task`` and ``app.task``."""
    from . import names

    for app in names.apps:
        if getattr(app, "task_cls", None) is not None:
            return app.Task  # type: ignore[no-any-return]
    return Task


def _register(task: Task) -> Any:
    def run_task(ctx: Any) -> Any:
        return run(task, ctx)

    run_task.__qualname__ = run_task.__name__ = f"run_{type(task).__name__}"
    run_task.__module__ = type(task).__module__
    rate = task.rate_limit
    handle = job(
        task.name,  # type: ignore[arg-type]
        idempotency_key="call",  # every call its own job; task_id= is a call's own key
        label=task.name or "",
        queue=task.queue,
        priority=job_priority(task.priority) or 0,
        retry=TaskRetry(max_retries=task.max_retries, default_retry_delay=task.default_retry_delay),
        timeout=task.soft_time_limit,
        time_limit=task.time_limit,
        rate=_rate(rate) if rate is not None else None,
        **_hooks(task),
    )(run_task)
    handle.timeout_error = SoftTimeLimitExceeded
    handle.expected_errors = tuple(task.throws)
    return handle


def _hooks(task: Task) -> dict[str, Any]:
    hooks: Hooks = hooks_of(task, Task)
    return {
        "on_success": hooks.on_success,
        "on_failure": hooks.on_failure,
        "on_retry": hooks.on_retry,
    }


def _rate(rate: Any) -> str:
    """Celery's ``rate_limit`` ("10/m", "100/s", "1/h", or a number per second)."""
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        return f"{int(rate)}/s"
    return str(rate)


def run(task: Task, ctx: Any) -> Any:
    """One attempt of ``task`` in a worker: the body with its request, its value as JSON."""
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    args, kwargs = arguments(payload)
    if payload.get("previous"):
        args = [decode(ctx.previous), *args]  # a chain's link: the result before it first
    job = ctx.job
    request = Request(
        id=task_id_of(job),
        retries=max(job.attempts - 1, 0),
        args=args,
        kwargs=kwargs,
        eta=job.run_at,
        expires=job.expires_at,
        hostname=job.worker_id,
        delivery_info={
            "exchange": "",
            "routing_key": job.queue,
            "priority": -job.priority if higher_runs_first() else job.priority,
            "redelivered": job.attempts > 1,
        },
        is_eager=False,
        called_directly=False,
        task=task.name,
        parent_id=str(job.parent_id) if job.parent_id else None,
        timelimit=(task.time_limit, task.soft_time_limit),
        job=job,
        ctx=ctx,
    )
    stack = requests.stack()
    stack.append(request)
    try:
        task.before_start(request.id or "", args, kwargs)
        if type(task).__call__ is not Task.__call__:
            value = task(*args, **kwargs)  # a base's own __call__ wraps each run, as in Celery
        else:
            value = task.call_run(args, kwargs)
    except Ignore as exc:
        raise Cancelled(f"ignored: the task raised Ignore ({exc})") from exc
    except Reject as exc:
        if exc.requeue:
            raise RetryLater(f"rejected and requeued: {exc.reason}", after=0) from exc
        raise Unrecoverable(f"rejected: {exc.reason}") from exc
    finally:
        stack.pop()
    return None if task.ignore_result else encode(value)
