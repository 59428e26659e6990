"""``handle(payload)``: run a job's function inline, now, as Celery's ``task(...)`` does.

No row is written and no worker is involved: the payload is validated through the kind's
``input`` serializer, and the function gets an ``InlineContext`` whose steps are plain calls
(``run`` calls ``fn``, ``atomic`` calls it in ``transaction.atomic()``, ``sleep`` returns at
once, ``spawn`` runs each child inline and ``gather`` returns their results). Exceptions
propagate to the caller as they are; ``log`` and ``progress`` go to the
``django_jobs.inline`` logger.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ... import clock
from ...conf import jobs_settings
from ...durations import Duration, parse_duration
from ...exceptions import StepDuplicate
from ...models import Job
from ...states import JobState
from ..durable.steps import StepInfo
from .context import Requeue

if TYPE_CHECKING:
    from ...kinds.handle import JobHandle

logger = logging.getLogger("django_jobs.inline")


def run_inline(handle: JobHandle, payload: Any) -> Any:
    """Validate ``payload`` as admission would, then call the function with an inline ctx."""
    validated = handle.validate_payload(payload)
    return handle.func(InlineContext(handle, validated))


class InlineSteps:
    """``ctx.step`` of an inline run: every step is a plain call, replayed by nobody."""

    def __init__(self, ctx: InlineContext) -> None:
        self.ctx = ctx
        self._seen: set[str] = set()
        self._children: list[Any] = []

    def _enter(self, name: str) -> StepInfo:
        if name in self._seen:
            raise StepDuplicate(
                f"Step name {name!r} is used twice in one run of {self.ctx.kind!r}. Step "
                "names are the replay key: give each step its own name."
            )
        self._seen.add(name)
        return StepInfo(key=f"{self.ctx.kind}:inline:{name}", interrupted=False, attempt=1)

    @staticmethod
    def _call(fn: Callable[..., Any], info: StepInfo) -> Any:
        try:
            takes_info = any(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
                for p in inspect.signature(fn).parameters.values()
            )
        except (TypeError, ValueError):
            takes_info = False
        return fn(info) if takes_info else fn()

    def run(self, name: str, fn: Callable[..., Any], *, recover: str = "retry") -> Any:
        return self._call(fn, self._enter(name))

    def atomic(self, name: str, fn: Callable[..., Any]) -> Any:
        info = self._enter(name)
        with transaction.atomic(using=jobs_settings.DATABASE):
            return self._call(fn, info)

    def sleep(self, name: str, duration: Duration) -> None:
        self._enter(name)
        parse_duration(duration, name=f"sleep({name!r}) duration")  # checked, not waited

    def wait_for_event(self, name: str, event: str, **options: Any) -> Any:
        raise TypeError(
            f"Step {name!r} waits for the event {event!r}: a job called inline cannot wait for "
            "an event. Enqueue it instead (handle.enqueue(payload))."
        )

    def spawn(self, name: str, handle: Any, payloads: Any, **options: Any) -> list[int]:
        """Run each child inline now; return handles for ``gather`` (not job ids)."""
        from ...kinds.registry import lookup  # on call: the registry imports this module on call

        self._enter(name)
        child = lookup(handle) if isinstance(handle, str) else handle
        items = [payloads] if isinstance(payloads, dict) else list(payloads)
        start = len(self._children)
        for item in items:
            self._children.append(run_inline(child, item))
        return list(range(start, len(self._children)))

    def gather(self, name: str, ids: list[int], **options: Any) -> list[Any]:
        self._enter(name)
        return [self._children[i] for i in ids]

    async def arun(self, name: str, fn: Callable[..., Any], *, recover: str = "retry") -> Any:
        value = self.run(name, fn, recover=recover)
        return await value if inspect.isawaitable(value) else value

    async def aatomic(self, name: str, fn: Callable[..., Any]) -> Any:
        return self.atomic(name, fn)

    async def asleep(self, name: str, duration: Duration) -> None:
        self.sleep(name, duration)

    async def await_for_event(self, name: str, event: str, **options: Any) -> Any:
        return self.wait_for_event(name, event, **options)

    async def aspawn(self, name: str, handle: Any, payloads: Any, **options: Any) -> list[int]:
        start = len(self._children)
        ids = self.spawn(name, handle, payloads, **options)
        for index in range(start, len(self._children)):  # async children: run them now
            if inspect.isawaitable(self._children[index]):
                self._children[index] = await self._children[index]
        return ids

    async def agather(self, name: str, ids: list[int], **options: Any) -> list[Any]:
        return self.gather(name, ids, **options)


class InlineContext:
    """The ``ctx`` of ``handle(payload)``: ``job`` is an unsaved row (``pk`` None); one
    attempt, the last."""

    attempt = 1
    owner = None
    tenant = None
    previous = None
    cancelled = False
    is_last_attempt = True

    def __init__(self, handle: JobHandle, payload: Any) -> None:
        self.kind = handle.kind
        self.payload = payload
        self.job = Job(
            kind=handle.kind,
            queue=handle.queue,
            engine=handle.engine,
            state=JobState.RUNNING,
            payload=payload,
            attempts=1,
            max_attempts=1,
            version=handle.version,
        )
        self.state = handle.capture(payload) if handle.capture is not None else None
        self.step = InlineSteps(self)

    def log(self, message: str) -> None:
        logger.info("%s: %s", self.kind, message)

    def progress(self, stage: str, percent: float | None = None) -> None:
        logger.info("%s: %s %s", self.kind, stage, "" if percent is None else f"{percent}%")

    async def alog(self, message: str) -> None:
        self.log(message)

    async def aprogress(self, stage: str, percent: float | None = None) -> None:
        self.progress(stage, percent)

    def requeue(self, reason: str, after: Duration = "30s") -> Requeue:
        return Requeue(str(reason), clock.now() + parse_duration(after, name="after"))

    def check_cancelled(self) -> None:
        return None

    async def acheck_cancelled(self) -> None:
        return None
