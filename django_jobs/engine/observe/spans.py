"""The spans of each seam: ``send {queue}`` around an admission, ``process {queue}`` around
an attempt, ``step {name}`` around a step's activity, and what they share (the messaging
attributes, a failure's status, the W3C context stored on a job's row).

Each is made by ``engine.observe.tracing``, which passes the loaded API (``providers.Api``)
and the tracer in; the ``No*`` twins are what it gives while tracing is off.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ...conf import jobs_settings
from ...states import JobState
from .providers import SYSTEM

if TYPE_CHECKING:
    from ...models import Job
    from ...store import NewJob, Outcome
    from .providers import Api, Instruments
    from .running import Running

#: The keys of a stored context: the enqueue's (W3C ``traceparent`` and ``tracestate``) and
#: the last attempt's ``traceparent`` (``previous``), which a retry links to.
TRACEPARENT, TRACESTATE, PREVIOUS = "traceparent", "tracestate", "previous"

#: The name of the schedule whose occurrence is being admitted (``scheduled``), if any.
_SCHEDULE: ContextVar[str | None] = ContextVar("django_jobs_schedule", default=None)


def messaging_attributes(operation: str, kind_of_op: str, queue: str, kind: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": kind_of_op,
        "messaging.destination.name": queue,
        "messaging.django_jobs.kind": kind,
    }


def error_type(exc: BaseException) -> str:
    """The exception's qualified name (``error.type``): ``module.Class``, ``Class`` for builtins."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def fail(
    api: Api, span: Any, exc: BaseException | None, kind: str | None = None, text: str = ""
) -> None:
    span.set_attribute("error.type", error_type(exc) if exc is not None else (kind or "_OTHER"))
    if exc is not None:
        span.record_exception(exc)
    span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, text or None))


def stored_context(api: Api, stored: Any, key: str) -> Any:
    """The span context stored under ``key`` (``traceparent`` or ``previous``), or None when
    absent or malformed (a malformed context is ignored, never an error)."""
    if not isinstance(stored, dict):
        return None
    traceparent = stored.get(key)
    if not isinstance(traceparent, str):
        return None
    carrier = {TRACEPARENT: traceparent}
    state = stored.get(TRACESTATE)
    if key == TRACEPARENT and isinstance(state, str):
        carrier[TRACESTATE] = state
    try:
        context = api.propagator.extract(carrier, context=api.context.Context())
    except Exception:
        return None
    span_context = api.trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


# -- send ------------------------------------------------------------------------------------


class NoSend:
    """What ``sending`` gives when tracing is off: nothing happens."""

    def __enter__(self) -> NoSend:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def sent(self, jobs: Sequence[Job]) -> None:
        return None


NO_SEND = NoSend()


class Send(NoSend):
    """One ``send {queue}`` span around an admission; stamps its context on the rows. Counts
    the jobs sent (``messaging.client.sent.messages``) when metrics are on."""

    def __init__(
        self, api: Api, tracer: Any, instruments: Instruments | None, rows: Sequence[NewJob]
    ):
        self.api, self.tracer, self.instruments, self.rows = api, tracer, instruments, rows
        self.span: Any = None

    def __enter__(self) -> Send:
        if self.tracer is not None:
            self._start()
        return self

    def _start(self) -> None:
        api = self.api
        first = self.rows[0]
        schedule = _SCHEDULE.get()
        attributes = messaging_attributes("send", "send", first.queue, first.kind)
        if len(self.rows) > 1:
            attributes["messaging.batch.message_count"] = len(self.rows)
        if schedule is not None:
            # A schedule's occurrence starts a trace of its own, named for the schedule.
            attributes["messaging.django_jobs.schedule"] = schedule
            name, parent = f"send {schedule}", api.context.Context()
        else:
            name, parent = f"send {first.queue}", None
        self.span = self.tracer.start_span(
            name, context=parent, kind=api.trace.SpanKind.PRODUCER, attributes=attributes
        )
        carrier: dict[str, str] = {}
        api.propagator.inject(carrier, context=api.trace.set_span_in_context(self.span))
        stored = carrier or None
        for row in self.rows:
            row.trace_context = stored

    def sent(self, jobs: Sequence[Job]) -> None:
        if self.span is not None and len(jobs) == 1 and jobs[0].pk is not None:
            self.span.set_attribute("messaging.message.id", str(jobs[0].pk))
            if jobs[0].deduped:  # a live job held the key: it keeps its own context
                self.span.set_attribute("messaging.django_jobs.deduped", True)
        if self.instruments is not None:
            first = self.rows[0]
            attributes = messaging_attributes("send", "send", first.queue, first.kind)
            self.instruments.sent.add(len(self.rows), attributes)

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.span is None:
            return
        if exc is not None:
            fail(self.api, self.span, exc)
        self.span.end()


@contextmanager
def scheduled(name: str) -> Iterator[None]:
    """Admissions inside are a schedule's occurrence: a root ``send {name}`` span."""
    token = _SCHEDULE.set(name)
    try:
        yield
    finally:
        _SCHEDULE.reset(token)


# -- process ---------------------------------------------------------------------------------


class NoProcess:
    def __enter__(self) -> NoProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def ended(self, outcome: Outcome, exc: BaseException | None) -> None:
        return None


NO_PROCESS = NoProcess()


class Process(NoProcess):
    """One ``process {queue}`` span around an attempt, made current while the runner runs."""

    def __init__(
        self,
        api: Api,
        tracer: Any,
        instruments: Instruments | None,
        job: Job,
        running: Running,
    ) -> None:
        self.api, self.tracer, self.instruments = api, tracer, instruments
        self.job, self.running = job, running
        self.span: Any = None
        self.token: Any = None
        self.began = 0.0
        self.error_type: str | None = None

    def __enter__(self) -> Process:
        self.began = time.perf_counter()
        if self.tracer is not None:
            self._start()
        return self

    def _start(self) -> None:
        api = self.api
        job, trace = self.job, api.trace
        stored = job.trace_context
        sent = stored_context(api, stored, TRACEPARENT)
        previous = stored_context(api, stored, PREVIOUS)
        attempt = max(int(job.attempts or 1), 1)
        relationship = jobs_settings.TRACE_RELATIONSHIP
        child = relationship == "child" or (relationship not in ("child", "link") and attempt == 1)
        links = []
        if sent is not None:
            links.append(trace.Link(sent, {"messaging.django_jobs.link": "send"}))
        if previous is not None:
            links.append(trace.Link(previous, {"messaging.django_jobs.link": "previous_attempt"}))
        # Never the worker's ambient context: the stored one, or a new root.
        parent = api.context.Context()
        if child and sent is not None:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(sent), parent)
        attributes = messaging_attributes("process", "process", job.queue, job.kind)
        attributes["messaging.message.id"] = str(job.pk)
        attributes["messaging.django_jobs.attempt"] = attempt
        self.span = self.tracer.start_span(
            f"process {job.queue}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        )
        context = trace.set_span_in_context(self.span, api.context.Context())
        self.running.trace = context
        self.token = api.context.attach(context)

    def ended(self, outcome: Outcome, exc: BaseException | None) -> None:
        state = outcome.state
        if state in (JobState.FAILED, JobState.BLOCKED, JobState.UNKNOWN) or (
            state == JobState.QUEUED and exc is not None
        ):
            self.error_type = error_type(exc) if exc is not None else str(state)
        if self.span is not None:
            self._ended(outcome, exc)

    def _ended(self, outcome: Outcome, exc: BaseException | None) -> None:
        span, state = self.span, outcome.state
        span.set_attribute("messaging.django_jobs.outcome", str(state))
        reason = (outcome.error or "").split("\n", 1)[0]
        if state == JobState.QUEUED:
            span.add_event("retry", _event(reason, outcome))
        elif state == JobState.WAITING:
            text = outcome.wait_reason or ""
            # ``step.sleep``'s reason reads "sleeping in step ..." (engine.steps).
            name = "sleep" if text.startswith("sleeping in step") else "wait"
            span.add_event(name, _event(text, outcome))
        elif state == JobState.CANCELLED:
            span.add_event("cancel", {"reason": reason})
        if self.error_type is not None:
            fail(self.api, span, exc, str(state), reason)
        if state != JobState.SUCCEEDED or self.job.parent_id is not None:
            # Stored with the outcome, for the next attempt to link to (and, for a child, its
            # parent's gather).
            api = self.api
            carrier: dict[str, str] = {}
            api.propagator.inject(carrier, context=api.trace.set_span_in_context(span))
            if TRACEPARENT in carrier:
                stored = self.job.trace_context
                kept = dict(stored) if isinstance(stored, dict) else {}
                outcome.trace_context = {**kept, PREVIOUS: carrier[TRACEPARENT]}

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.instruments is not None:
            job = self.job
            attributes = messaging_attributes("process", "process", job.queue, job.kind)
            if exc is not None or self.error_type is not None:
                attributes["error.type"] = error_type(exc) if exc is not None else self.error_type
            self.instruments.duration.record(time.perf_counter() - self.began, attributes)
        if self.span is None:
            return
        self.running.trace = None
        self.api.context.detach(self.token)
        if exc is not None:
            fail(self.api, self.span, exc)
        self.span.end()


def _event(reason: str, outcome: Outcome) -> dict[str, Any]:
    attributes: dict[str, Any] = {"reason": reason}
    if outcome.run_at is not None:
        attributes["run_at"] = outcome.run_at.isoformat()
    return attributes


# -- steps -----------------------------------------------------------------------------------


@contextmanager
def step_span(api: Api, tracer: Any, name: str) -> Iterator[None]:
    """A ``step {name}`` span, current while the step's activity runs."""
    span = tracer.start_span(f"step {name}", kind=api.trace.SpanKind.INTERNAL)
    span.set_attribute("messaging.django_jobs.step", name)
    token = api.context.attach(api.trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        fail(api, span, exc)
        raise
    finally:
        api.context.detach(token)
        span.end()


class NoStep:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


NO_STEP = NoStep()
