"""``JobHandle``: what ``@job`` returns, a kind's definition and the door to enqueue it.

A handle sits below the engine: ``enqueue`` and ``handle(payload)`` go through ``doors``, which
the app's ``ready()`` connects to the engine's admission and inline run.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from ..conf import jobs_settings
from ..durations import Duration
from ..exceptions import InvalidPayload, JobTimeout
from ..schema import serializer_json_schema
from ..validation import check_key
from ..validation import storable_json as ensure_json
from . import doors
from .hooks import Hooks
from .retry import Retry
from .signature import Signature

if TYPE_CHECKING:
    from ..models import Job

#: ``@job(idempotency_key=)``'s named keys: "payload", one live job per payload (queued or
#: running); "call", every enqueue its own job, as every Celery ``delay()`` runs.
NAMED_KEYS = ("payload", "call")

#: The policy of a kind that names none while ``JOBS["DEFAULT_RETRY"]`` is None.
BUILT_IN_RETRY = Retry()

#: What ``handle(x)`` takes for a payload (run inline), rather than a ``ctx`` (run as runner).
_PAYLOAD_TYPES = (dict, list, str, int, float, bool, type(None))


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
    #: The policy ``@job(retry=)`` named; None: ``JOBS["DEFAULT_RETRY"]``, read when used
    #: (``retry``), so a setting changed after the kind was defined applies to it.
    own_retry: Retry | None = None
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
    #: What the soft limit raises in the body: ``JobTimeout``, or a subclass of it (the Celery
    #: layer's kinds raise ``SoftTimeLimitExceeded``, which Celery code catches by name).
    timeout_error: type[JobTimeout] = JobTimeout
    #: Failures the kind expects (a Celery task's ``throws``): logged without their traceback,
    #: still failures, their stored error whole.
    expected_errors: tuple[type[BaseException], ...] = ()

    @property
    def retry(self) -> Retry:
        """The retry policy in force: the kind's own, else ``JOBS["DEFAULT_RETRY"]``."""
        return self.own_retry or default_retry()

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
        if self.idempotency_key == "call":
            # Unique rather than no key: the stores match each inserted row to its job by
            # (kind, owner, key), which a batch of keyless rows would not tell apart.
            return "call:" + uuid.uuid4().hex
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
        return doors.admit(
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
        return doors.admit(self, list(payloads), **options)

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
            return doors.run_inline(self, args[0])
        return self.func(*args, **kwargs)

    def s(self, payload: Any = None, **options: Any) -> Signature:
        """A signature: this kind, a payload and enqueue options, for ``chain`` and
        ``group`` (``django_jobs.canvas``), or ``.enqueue()`` on its own."""
        return Signature(self, payload, options)


def default_retry() -> Retry:
    """``JOBS["DEFAULT_RETRY"]``: the policy of every kind whose ``@job`` names none."""
    value = jobs_settings.default_retry
    if value is None:
        return BUILT_IN_RETRY
    if not isinstance(value, Retry):
        raise ImproperlyConfigured(f"{NOT_A_RETRY.format(value=value)} {WRITE_A_RETRY}")
    return value


NOT_A_RETRY = 'JOBS["DEFAULT_RETRY"] = {value!r} is not a Retry.'
WRITE_A_RETRY = (
    'Write "DEFAULT_RETRY": Retry(attempts=1) (from django_jobs import Retry) to run each job '
    "once unless its @job names retry=, or leave the key out for Retry(attempts=3)."
)


def payload_digest(payload: Any) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
