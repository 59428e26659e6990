"""The runner registry: ``@job`` turns a function into a ``JobHandle`` registered by kind."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .conf import jobs_settings
from .durations import Duration, parse_duration, parse_rate
from .engine.hooks import Hook, Hooks
from .engine.retry import Retry
from .exceptions import IdempotencyRequired, InvalidPayload, JobDuplicate, UnknownKind
from .schema import serializer_json_schema
from .signature import Signature
from .validation import check_key
from .validation import storable_json as ensure_json

if TYPE_CHECKING:
    from .models import Job

#: What ``handle(x)`` takes for a payload (run inline), rather than a ``ctx`` (run as runner).
_PAYLOAD_TYPES = (dict, list, str, int, float, bool, type(None))

_registry: dict[str, JobHandle] = {}
_lock = threading.Lock()


@dataclass(eq=False, kw_only=True)
class JobHandle:
    """What ``@job`` returns: the kind's definition and the door to enqueue it."""

    kind: str
    func: Callable[..., Any]
    idempotency_key: Callable[[Any], str] | str
    label: str = ""
    group: str = ""
    member_safe: bool = False
    schedulable: bool = False
    queue: str = "default"
    engine: str = "default"
    priority: int = 0
    retry: Retry = field(default_factory=Retry)
    timeout: timedelta | None = None
    #: The hard limit as given to ``@job(time_limit=)``; ``hard_limit`` is the one in force.
    time_limit: timedelta | None = None
    input: type | None = None
    version: str = ""
    capture: Callable[[Any], Any] | None = None
    on: str | None = None
    rate: str | None = None
    hooks: Hooks | None = None
    #: Where a job of this kind runs when its enqueue names no queue: ``(queue, engine)``
    #: from its payload. None: the kind's own ``queue`` and ``engine``. The built-in flow kind
    #: runs on its first member's (``django_jobs.canvas``).
    place: Callable[[Any], tuple[str, str]] | None = None

    @property
    def hard_limit(self) -> timedelta | None:
        """The hard time limit (Celery's ``time_limit``): ``time_limit``, or ``timeout`` plus
        ``JOBS["KILL_GRACE"]`` when only the soft limit is set; None without either. A worker
        running jobs in child processes ends the child of a job past it (``engine.supervisor``).
        """
        if self.time_limit is not None:
            return self.time_limit
        if self.timeout is not None:
            return self.timeout + jobs_settings.kill_grace
        return None

    @cached_property
    def is_async(self) -> bool:
        # Asked for every run; ``iscoroutinefunction`` unwraps the function each time.
        return inspect.iscoroutinefunction(self.func)

    # -- admission ----------------------------------------------------------------------------

    def validate_payload(self, payload: Any) -> Any:
        """Return the validated payload (the serializer's ``validated_data`` when ``input``)."""
        ensure_json(payload, what="payload")
        if self.input is None:
            return payload
        serializer = self.input(data=payload)
        if not serializer.is_valid():
            errors = json.loads(json.dumps(serializer.errors, default=str))
            raise InvalidPayload(
                f"The payload of {self.kind!r} is invalid: {errors}. Fix the fields listed "
                "and submit again.",
                errors=errors,
            )
        return serializer.validated_data

    def key_for(self, payload: Any) -> str:
        if self.idempotency_key == "payload":
            return "payload:" + payload_digest(payload)
        try:
            key = self.idempotency_key(payload)  # type: ignore[operator]
        except Exception as exc:
            raise InvalidPayload(
                f"The idempotency_key function of {self.kind!r} failed on this payload "
                f"({type(exc).__name__}: {exc}). Pass idempotency_key= to enqueue, or fix the "
                "payload so the key can be computed."
            ) from exc
        if not isinstance(key, str) or not key:
            raise InvalidPayload(
                f"The idempotency_key function of {self.kind!r} returned {key!r}; it must "
                "return a non-empty string."
            )
        return check_key(key, what=f"idempotency key computed for {self.kind!r}")

    # -- enqueue ------------------------------------------------------------------------------

    def enqueue(
        self,
        payload: Any = None,
        *,
        owner: Any = None,
        tenant: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        idempotency_key: str | None = None,
        on_conflict: str = "return",
        expires: Duration | datetime | None = None,
        after_current: bool = False,
    ) -> Job:
        # Imported on call: ``@job`` modules are imported while Django loads its apps, and
        # admission needs the models (the registry itself never touches them).
        from .engine.admission import admit

        return admit(
            self,
            [payload],
            owner=owner,
            tenant=tenant,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            idempotency_key=idempotency_key,
            on_conflict=on_conflict,
            expires=expires,
            after_current=after_current,
        )[0]

    def enqueue_many(self, payloads: Iterable[Any], **options: Any) -> list[Job]:
        from .engine.admission import admit  # on call: see enqueue

        return admit(self, list(payloads), **options)

    def as_user(self, user: Any, payload: Any = None, **options: Any) -> Job:
        tenant_of = jobs_settings.callable_setting("TENANT_OF")
        options.setdefault("tenant", tenant_of(user) if tenant_of else None)
        return self.enqueue(payload, owner=user, **options)

    async def aenqueue(self, payload: Any = None, **options: Any) -> Job:
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue)(payload, **options)

    async def aenqueue_many(self, payloads: Iterable[Any], **options: Any) -> list[Job]:
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue_many)(list(payloads), **options)

    # -- manifest -----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label or self.kind,
            "group": self.group,
            "member_safe": self.member_safe,
            "schedulable": self.schedulable,
            "queue": self.queue,
            "engine": self.engine,
            "concurrency": jobs_settings.engine_concurrency(self.engine),
            "priority": self.priority,
            "retry": self.retry.as_json(),
            "timeout": self.timeout.total_seconds() if self.timeout else None,
            "time_limit": self.hard_limit.total_seconds() if self.hard_limit else None,
            "version": self.version,
            "input": serializer_json_schema(self.input),
            "on": self.on,
            "async": self.is_async,
            "rate": self.rate,
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """With a ``ctx``: run as the runner. With a payload (any JSON value, or nothing):
        run the function inline, now, as Celery's ``task(...)`` (``engine.inline``); an
        ``async def`` runner returns its coroutine (``await handle(payload)``)."""
        if not args and not kwargs:
            args = (None,)
        if len(args) == 1 and not kwargs and isinstance(args[0], _PAYLOAD_TYPES):
            from .engine.inline import run_inline  # on call: the engine needs the models

            return run_inline(self, args[0])
        return self.func(*args, **kwargs)

    def s(self, payload: Any = None, **options: Any) -> Signature:
        """A signature: this kind, a payload and enqueue options, for ``chain`` and
        ``group`` (``django_jobs.canvas``), or ``.enqueue()`` on its own."""
        return Signature(self, payload, options)


def job(
    kind: str,
    *,
    idempotency_key: Callable[[Any], str] | str | None = None,
    label: str = "",
    group: str = "",
    member_safe: bool = False,
    schedulable: bool = False,
    queue: str = "default",
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
            'such as lambda p: f"render:{p[\'video\']}" (one live job per video), or "payload" to '
            "use a hash of the payload."
        )
    if not (callable(idempotency_key) or idempotency_key == "payload"):
        raise IdempotencyRequired(
            f"{_caller()}: @job({kind!r}, idempotency_key={idempotency_key!r}): pass a "
            'callable(payload) -> str, or the string "payload".'
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
            retry=retry or Retry(),
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


def _caller() -> str:
    """``path/to/jobs.py:LINE`` of the ``@job(...)`` being applied: the first frame outside
    this package (a decorated function's own line, for an error raised at import time, when
    the traceback's last frames are Django's app loading or autoreloader). The path is relative
    to the working directory when it lies under it."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
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


def payload_digest(payload: Any) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
