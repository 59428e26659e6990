"""The runner registry: ``@job`` turns a function into a ``JobHandle`` registered by kind,
and the lookups by kind (``lookup``, ``get``, ``all_handles``) everything else goes through."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.checks import CheckMessage, Error
from django.core.checks import register as register_check

from ..checks import JOBS_TAG
from ..conf import jobs_settings
from ..durations import Duration, parse_duration, parse_rate
from ..exceptions import IdempotencyRequired, InvalidPayload, JobDuplicate, UnknownKind
from ..validation import check_label
from .handle import NAMED_KEYS, NOT_A_RETRY, WRITE_A_RETRY, JobHandle
from .hooks import Hook, Hooks
from .retry import Retry

if TYPE_CHECKING:
    from ..models import Job

_registry: dict[str, JobHandle] = {}
_lock = threading.Lock()


def job(
    kind: str,
    *,
    idempotency_key: Callable[[Any], str] | str | None = None,
    label: str = "",
    group: str = "",
    member_safe: bool = False,
    schedulable: bool = False,
    queue: str | None = "default",
    engine: str = "default",
    priority: int = 0,
    retry: Retry | None = None,
    timeout: Duration | None = None,
    time_limit: Duration | None = None,
    input: type | None = None,  # noqa: A002 - the public name of the option
    version: str = "",
    capture: Callable[[Any], Any] | None = None,
    on: str | None = None,
    rate: str | None = None,
    on_success: Hook | None = None,
    on_failure: Hook | None = None,
    on_retry: Hook | None = None,
) -> Callable[[Callable[..., Any]], JobHandle]:
    """Register the decorated function as the runner of ``kind``."""
    if not isinstance(kind, str) or not kind:
        raise TypeError("@job needs a kind: a non-empty string that names the durable queue key.")
    if idempotency_key is None:
        raise IdempotencyRequired(
            f"{_caller()}: @job({kind!r}) needs idempotency_key=: a callable(payload) -> str "
            'such as lambda p: f"render:{p[\'video\']}" (one live job per video), "payload" '
            '(one live job per payload, queued or running), or "call" (every enqueue its own '
            "job, as every Celery delay() runs)."
        )
    if not (callable(idempotency_key) or idempotency_key in NAMED_KEYS):
        raise IdempotencyRequired(
            f"{_caller()}: @job({kind!r}, idempotency_key={idempotency_key!r}): pass a "
            'callable(payload) -> str, "payload" (one live job per payload, queued or '
            'running) or "call" (every enqueue its own job).'
        )
    if queue is None:
        queue = "default"  # Celery's queue=None: the default queue
    if not isinstance(queue, str) or not queue.strip():
        raise ValueError(
            f"{_caller()}: @job({kind!r}, queue={queue!r}): name a queue (text), or leave "
            'queue= out (or None) for "default".'
        )
    try:
        check_label(queue, what="queue")
    except InvalidPayload as exc:
        raise ValueError(f"{_caller()}: @job({kind!r}, queue={queue!r}): {exc.message}") from None
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(
            f"{_caller()}: @job({kind!r}, retry={retry!r}): pass a Retry, e.g. "
            'retry=Retry(attempts=1), or leave retry= out for JOBS["DEFAULT_RETRY"].'
        )

    if rate is not None:
        parse_rate(rate)  # a bad rate fails at decoration, not in a worker's claim loop
    soft = parse_duration(timeout, name="timeout") if timeout is not None else None
    hard = parse_duration(time_limit, name="time_limit") if time_limit is not None else None
    if hard is not None and (hard <= timedelta(0) or (soft is not None and hard < soft)):
        raise ValueError(
            f"{_caller()}: @job({kind!r}, time_limit={time_limit!r}): the hard time limit must "
            "be above zero and not below timeout= (the soft limit comes first)."
        )
    hooks = Hooks.of(kind, on_success=on_success, on_failure=on_failure, on_retry=on_retry)

    def decorator(func: Callable[..., Any]) -> JobHandle:
        handle = JobHandle(
            kind=kind,
            func=func,
            idempotency_key=idempotency_key,
            label=label,
            group=group,
            member_safe=member_safe,
            schedulable=schedulable,
            queue=queue,
            engine=engine,
            priority=priority,
            own_retry=retry,
            timeout=soft,
            time_limit=hard,
            input=input,
            version=str(version),
            capture=capture,
            on=on,
            rate=rate,
            hooks=hooks,
        )
        register(handle)
        return handle

    return decorator


@register_check(JOBS_TAG)
def check_default_retry(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_jobs.E013``: ``JOBS["DEFAULT_RETRY"]`` is not a ``Retry`` (here, not in
    ``checks``: that module is below the engine, whose class this is)."""
    value = jobs_settings.user_settings.get("DEFAULT_RETRY")
    if value is None or isinstance(value, Retry):
        return []
    return [
        Error(
            NOT_A_RETRY.format(value=value),
            hint=WRITE_A_RETRY,
            id="django_jobs.E013",
        )
    ]


def _caller() -> str:
    """``path/to/jobs.py:LINE`` of the ``@job(...)`` being applied: the first frame outside
    this package (a decorated function's own line, for an error raised at import time, when
    the traceback's last frames are Django's app loading or autoreloader). The path is relative
    to the working directory when it lies under it."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        package
    ):
        frame = frame.f_back
    path = frame.f_code.co_filename
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        relative = path
    if not relative.startswith(os.pardir):
        path = relative
    return f"{path}:{frame.f_lineno}"


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (autoreload, tests) yields a new function object for the same code.
    return a is b or (
        getattr(a, "__module__", None) == getattr(b, "__module__", None)
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
    )


def register(handle: JobHandle) -> None:
    with _lock:
        existing = _registry.get(handle.kind)
        if existing is not None:
            if existing.engine != handle.engine:
                raise JobDuplicate(
                    f"Kind {handle.kind!r} is registered on engine {existing.engine!r} and "
                    f"{handle.engine!r}; a kind belongs to one engine. Pick one."
                )
            if not _same_function(existing.func, handle.func):
                raise JobDuplicate(
                    f"Kind {handle.kind!r} is already registered by "
                    f"{existing.func.__module__}.{existing.func.__qualname__}; give "
                    f"{handle.func.__module__}.{handle.func.__qualname__} another kind."
                )
        _registry[handle.kind] = handle


def unregister(kind: str) -> None:
    with _lock:
        _registry.pop(kind, None)


def lookup(kind: str) -> JobHandle:
    try:
        return _registry[kind]
    except KeyError:
        raise UnknownKind(
            f"No job is registered under kind {kind!r}. Define it with @job({kind!r}, ...) in "
            "an installed app's jobs.py, or check the spelling "
            "(`manage.py jobs kinds` lists the registered kinds)."
        ) from None


def enqueue(kind: str, payload: Any = None, **options: Any) -> Job:
    """Enqueue a job by kind name (``django_jobs.enqueue``); same options as
    ``JobHandle.enqueue``."""
    return lookup(kind).enqueue(payload, **options)


def get(kind: str) -> JobHandle | None:
    return _registry.get(kind)


def all_handles() -> list[JobHandle]:
    return sorted(_registry.values(), key=lambda h: h.kind)


def handles_on(event: str) -> list[JobHandle]:
    return [h for h in all_handles() if h.on == event]


def kinds_of_engine(engine: str) -> list[str]:
    return [h.kind for h in all_handles() if h.engine == engine]
