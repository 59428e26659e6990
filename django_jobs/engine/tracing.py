"""OpenTelemetry spans of the jobs, on the seams the engine already has (docs/observability.md).

With ``opentelemetry-api`` importable and a real ``TracerProvider`` (passed to ``configure``,
named in ``JOBS["TRACER_PROVIDER"]``, or set globally with the SDK), the engine emits spans
that follow OpenTelemetry's messaging semantic conventions:

* ``send {queue}`` (PRODUCER) around each admission (``enqueue``, ``enqueue_many``, a spawn,
  a schedule's occurrence, the Tasks backend); its W3C context (``traceparent``,
  ``tracestate``, never baggage) goes on the rows, in the same INSERT (``NewJob``);
* ``process {queue}`` (CONSUMER), one per attempt, started from the stored context, never from
  the worker's own (``JOBS["TRACE_RELATIONSHIP"]``); its outcome as events and status;
* ``step {name}`` (INTERNAL) for each step whose activity runs; a replay is an event.

Without the API, or with no provider configured (OpenTelemetry's proxy), every function here
returns at once: no span, no stored context (the column stays NULL), no statement changed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from ..checks import TRACE_RELATIONSHIPS
from ..conf import jobs_settings
from ..states import JobState
from .running import CURRENT

if TYPE_CHECKING:
    from ..models import Job
    from ..store import NewJob, Outcome
    from .running import Running

SYSTEM = "django_jobs"
RELATIONSHIPS = TRACE_RELATIONSHIPS  # JOBS["TRACE_RELATIONSHIP"]'s values
#: The keys of a stored context: the enqueue's (W3C ``traceparent`` and ``tracestate``) and
#: the last attempt's ``traceparent`` (``previous``), which a retry links to.
TRACEPARENT, TRACESTATE, PREVIOUS = "traceparent", "tracestate", "previous"

#: The name of the schedule whose occurrence is being admitted (``scheduled``), if any.
_SCHEDULE: ContextVar[str | None] = ContextVar("django_jobs_schedule", default=None)

_UNSET: Any = object()
_api: Any = _UNSET  # the opentelemetry modules, loaded on first use (None: not installed)
_provider: Any = None  # configure()'s
_meter_provider: Any = None  # configure()'s
# The last provider asked and what it gave (None: a placeholder), so that the check made on
# every enqueue and attempt is a few reads; and every provider's, kept (id -> both).
_last_tracer: tuple[Any, Any] = (_UNSET, None)
_last_meter: tuple[Any, Any] = (_UNSET, None)
_tracers: dict[int, tuple[Any, Any]] = {}
_meters: dict[int, tuple[Any, _Instruments | None]] = {}
_imported: dict[str, Any] = {}  # JOBS["TRACER_PROVIDER"] as an import string -> the provider


class _Api:
    """The pieces of ``opentelemetry-api`` used here, imported once."""

    def __init__(self) -> None:
        from opentelemetry import context, metrics, trace
        from opentelemetry.environment_variables import (
            OTEL_PYTHON_METER_PROVIDER,
            OTEL_PYTHON_TRACER_PROVIDER,
        )
        from opentelemetry.metrics import NoOpMeterProvider
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context = context
        self.trace = trace
        self.metrics = metrics
        self.propagator = TraceContextTextMapPropagator()
        self.placeholders = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self.meter_placeholders: tuple[type, ...] = (NoOpMeterProvider,)
        # The global providers, read where the API keeps them (``get_tracer_provider()`` reads
        # the environment on each call while none is set: a microsecond and more per job).
        # Private names, hence the fallbacks to the public calls.
        self.tracer_globals: Any = trace
        self.meter_globals: Any = None
        try:
            from opentelemetry.metrics import _internal as meter_globals
            from opentelemetry.metrics._internal import _ProxyMeterProvider

            self.meter_placeholders += (_ProxyMeterProvider,)
            self.meter_globals = meter_globals
        except ImportError:
            pass
        if not hasattr(trace, "_TRACER_PROVIDER") or OTEL_PYTHON_TRACER_PROVIDER in os.environ:
            self.tracer_globals = None
        if not hasattr(self.meter_globals, "_METER_PROVIDER") or (
            OTEL_PYTHON_METER_PROVIDER in os.environ
        ):
            self.meter_globals = None

    def tracer_provider(self) -> Any:
        """The global TracerProvider, or None while none is set."""
        if self.tracer_globals is None:
            return self.trace.get_tracer_provider()
        return self.tracer_globals._TRACER_PROVIDER

    def meter_provider(self) -> Any:
        """The global MeterProvider, or None while none is set."""
        if self.meter_globals is None:
            return self.metrics.get_meter_provider()
        return self.meter_globals._METER_PROVIDER


def _load() -> _Api | None:
    global _api
    if _api is _UNSET:
        try:
            _api = _Api()
        except ImportError:
            _api = None
    return _api  # type: ignore[no-any-return]


def configure(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Use ``tracer_provider`` for the jobs' spans (None: back to ``JOBS["TRACER_PROVIDER"]``,
    then OpenTelemetry's global provider), and ``meter_provider`` for their metrics (None:
    the global one). Tests pass their own, with in-memory exporters and readers."""
    global _provider, _meter_provider, _last_tracer, _last_meter
    _provider, _meter_provider = tracer_provider, meter_provider
    _last_tracer = _last_meter = (_UNSET, None)
    _imported.clear()


def _tracer() -> Any:
    """The tracer to use, or None when tracing is off (no API, or no provider configured)."""
    global _last_tracer
    api = _load()
    if api is None:
        return None
    provider = _provider
    if provider is None:
        provider = jobs_settings.TRACER_PROVIDER
        if provider is None:
            provider = api.tracer_provider()
            if provider is None:
                return None
        elif isinstance(provider, str):
            if provider not in _imported:
                _imported[provider] = import_string(provider)
            provider = _imported[provider]
    last = _last_tracer
    if provider is last[0]:
        return last[1]
    found = _tracers.get(id(provider))
    if found is None or found[0] is not provider:
        real = not isinstance(provider, api.placeholders)
        found = (provider, provider.get_tracer("django_jobs") if real else None)
        _tracers[id(provider)] = found
    _last_tracer = found
    return found[1]


class _Instruments:
    """The jobs' metrics (messaging semantic conventions); attributes never name a job."""

    def __init__(self, meter: Any) -> None:
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Jobs admitted (enqueued, spawned, fired by a schedule).",
        )
        self.duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="How long one attempt of a job ran, from its start to its outcome.",
        )
        meter.create_observable_gauge(
            "messaging.django_jobs.queue.depth",
            callbacks=[_queue_depth],
            unit="{message}",
            description="Queued jobs per queue (due now or later), read at collection.",
        )


def _instruments() -> _Instruments | None:
    """The metric instruments, or None when no MeterProvider is configured."""
    global _last_meter
    api = _load()
    if api is None:
        return None
    provider = _meter_provider
    if provider is None:
        provider = api.meter_provider()
        if provider is None:
            return None
    last = _last_meter
    if provider is last[0]:
        return last[1]  # type: ignore[no-any-return]
    found = _meters.get(id(provider))
    if found is None or found[0] is not provider:
        # Made once per provider: the gauge's callback is registered once.
        real = not isinstance(provider, api.meter_placeholders)
        found = (provider, _Instruments(provider.get_meter("django_jobs")) if real else None)
        _meters[id(provider)] = found
    _last_meter = found
    return found[1]


def _queue_depth(options: Any) -> Iterator[Any]:
    """The gauge's callback: one count per queue (a read of the job table)."""
    from django.db import DatabaseError, connections
    from django.db.models import Count

    from ..models import Job

    api = _load()
    assert api is not None
    alias = jobs_settings.DATABASE
    try:
        rows = list(
            Job.objects.using(alias)
            .filter(state=JobState.QUEUED)
            .order_by()
            .values_list("queue")
            .annotate(n=Count("id"))
        )
    except DatabaseError:
        rows = []
    finally:
        # A metric reader's own thread: its connection is not kept open between collections.
        if threading.current_thread() is not threading.main_thread():
            connections[alias].close()
    for queue, count in rows:
        yield api.metrics.Observation(
            count, {"messaging.system": SYSTEM, "messaging.destination.name": queue}
        )


def enabled() -> bool:
    """Are spans emitted now?"""
    return _tracer() is not None


def _attributes(operation: str, kind_of_op: str, queue: str, kind: str) -> dict[str, Any]:
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


def _fail(span: Any, exc: BaseException | None, kind: str | None = None, text: str = "") -> None:
    api = _load()
    assert api is not None
    span.set_attribute("error.type", error_type(exc) if exc is not None else (kind or "_OTHER"))
    if exc is not None:
        span.record_exception(exc)
    span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, text or None))


# -- send ------------------------------------------------------------------------------------


class _NoSend:
    """What ``sending`` gives when tracing is off: nothing happens."""

    def __enter__(self) -> _NoSend:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def sent(self, jobs: Sequence[Job]) -> None:
        return None


_NO_SEND = _NoSend()


class _Send(_NoSend):
    """One ``send {queue}`` span around an admission; stamps its context on the rows. Counts
    the jobs sent (``messaging.client.sent.messages``) when metrics are on."""

    def __init__(self, tracer: Any, instruments: _Instruments | None, rows: Sequence[NewJob]):
        self.tracer, self.instruments, self.rows = tracer, instruments, rows
        self.span: Any = None

    def __enter__(self) -> _Send:
        if self.tracer is not None:
            self._start()
        return self

    def _start(self) -> None:
        api = _load()
        assert api is not None
        first = self.rows[0]
        schedule = _SCHEDULE.get()
        attributes = _attributes("send", "send", first.queue, first.kind)
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
            attributes = _attributes("send", "send", first.queue, first.kind)
            self.instruments.sent.add(len(self.rows), attributes)

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.span is None:
            return
        if exc is not None:
            _fail(self.span, exc)
        self.span.end()


def sending(rows: Sequence[NewJob]) -> _NoSend:
    """A context manager around the admission of ``rows``: a ``send`` span whose context each
    row stores (``trace_context``); call ``.sent(jobs)`` with the jobs admitted."""
    tracer, instruments = _tracer(), _instruments()
    if tracer is None and instruments is None:
        return _NO_SEND
    return _Send(tracer, instruments, rows)


@contextmanager
def scheduled(name: str) -> Iterator[None]:
    """Admissions inside are a schedule's occurrence: a root ``send {name}`` span."""
    token = _SCHEDULE.set(name)
    try:
        yield
    finally:
        _SCHEDULE.reset(token)


# -- process ---------------------------------------------------------------------------------


def _stored_context(api: _Api, stored: Any, key: str) -> Any:
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


class _NoProcess:
    def __enter__(self) -> _NoProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def ended(self, outcome: Outcome, exc: BaseException | None) -> None:
        return None


_NO_PROCESS = _NoProcess()


class _Process(_NoProcess):
    """One ``process {queue}`` span around an attempt, made current while the runner runs."""

    def __init__(
        self, tracer: Any, instruments: _Instruments | None, job: Job, running: Running
    ) -> None:
        self.tracer, self.instruments, self.job, self.running = tracer, instruments, job, running
        self.span: Any = None
        self.token: Any = None
        self.began = 0.0
        self.error_type: str | None = None

    def __enter__(self) -> _Process:
        self.began = time.perf_counter()
        if self.tracer is not None:
            self._start()
        return self

    def _start(self) -> None:
        api = _load()
        assert api is not None
        job, trace = self.job, api.trace
        stored = job.trace_context
        sent = _stored_context(api, stored, TRACEPARENT)
        previous = _stored_context(api, stored, PREVIOUS)
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
        attributes = _attributes("process", "process", job.queue, job.kind)
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
            _fail(span, exc, str(state), reason)
        if state != JobState.SUCCEEDED or self.job.parent_id is not None:
            # Stored with the outcome, for the next attempt to link to (and, for a child, its
            # parent's gather).
            api = _load()
            assert api is not None
            carrier: dict[str, str] = {}
            api.propagator.inject(carrier, context=api.trace.set_span_in_context(span))
            if TRACEPARENT in carrier:
                stored = self.job.trace_context
                kept = dict(stored) if isinstance(stored, dict) else {}
                outcome.trace_context = {**kept, PREVIOUS: carrier[TRACEPARENT]}

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.instruments is not None:
            job = self.job
            attributes = _attributes("process", "process", job.queue, job.kind)
            if exc is not None or self.error_type is not None:
                attributes["error.type"] = error_type(exc) if exc is not None else self.error_type
            self.instruments.duration.record(time.perf_counter() - self.began, attributes)
        if self.span is None:
            return
        api = _load()
        assert api is not None
        self.running.trace = None
        api.context.detach(self.token)
        if exc is not None:
            _fail(self.span, exc)
        self.span.end()


def _event(reason: str, outcome: Outcome) -> dict[str, Any]:
    attributes: dict[str, Any] = {"reason": reason}
    if outcome.run_at is not None:
        attributes["run_at"] = outcome.run_at.isoformat()
    return attributes


def processing(job: Job, running: Running) -> _NoProcess:
    """A context manager around one attempt of ``job``: its ``process`` span, current while the
    runner runs; call ``.ended(outcome, exc)`` with what the attempt came to."""
    tracer, instruments = _tracer(), _instruments()
    if tracer is None and instruments is None:
        return _NO_PROCESS
    return _Process(tracer, instruments, job, running)


def resume(running: Running) -> None:
    """Make ``running``'s span current in this context: an ``async def`` runner runs on its
    loop's thread, which does not share the executor thread's context."""
    if running.trace is not None:
        api = _load()
        if api is not None:
            api.context.attach(running.trace)


#: The most links a gather adds to its attempt's span (the SDK keeps 128 by default).
MAX_CHILD_LINKS = 128


def link_children(stored: Sequence[Any]) -> None:
    """A gather's children have ended: link the current attempt's span to each child's last
    attempt (its ``previous``, stored with its outcome), up to ``MAX_CHILD_LINKS``."""
    if not stored or _tracer() is None:
        return
    api = _load()
    assert api is not None
    span = api.trace.get_current_span()
    add_link = getattr(span, "add_link", None)  # opentelemetry-api 1.23 and later
    if add_link is None or not span.is_recording():
        return
    for each in stored[:MAX_CHILD_LINKS]:
        child = _stored_context(api, each, PREVIOUS)
        if child is not None:
            add_link(child, {"messaging.django_jobs.link": "child"})


# -- steps -----------------------------------------------------------------------------------


@contextmanager
def _step_span(tracer: Any, name: str) -> Iterator[None]:
    api = _load()
    assert api is not None
    span = tracer.start_span(f"step {name}", kind=api.trace.SpanKind.INTERNAL)
    span.set_attribute("messaging.django_jobs.step", name)
    token = api.context.attach(api.trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        _fail(span, exc)
        raise
    finally:
        api.context.detach(token)
        span.end()


class _NoStep:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_STEP = _NoStep()


def step(name: str) -> Any:
    """A context manager around a step's activity: a ``step {name}`` span under the attempt's."""
    tracer = _tracer()
    if tracer is None:
        return _NO_STEP
    return _step_span(tracer, name)


def step_replayed(name: str) -> None:
    """A step returned its stored value: an event ``step.replayed`` on the current span."""
    if _tracer() is None:
        return
    api = _load()
    assert api is not None
    span = api.trace.get_current_span()
    if span.is_recording():
        span.add_event("step.replayed", {"messaging.django_jobs.step": name})


# -- expiry ----------------------------------------------------------------------------------


def expired(jobs: Sequence[Job]) -> None:
    """Jobs ended unrun past their ``expires_at``: each traced one gets a short
    ``expire {queue}`` span in its enqueue's trace, with an ``expired`` event."""
    tracer = _tracer()
    if tracer is None:
        return
    api = _load()
    assert api is not None
    for job in jobs:
        sent = _stored_context(api, job.trace_context, TRACEPARENT)
        if sent is None:
            continue
        parent = api.trace.set_span_in_context(
            api.trace.NonRecordingSpan(sent), api.context.Context()
        )
        attributes = _attributes("settle", "settle", job.queue, job.kind)
        attributes["messaging.message.id"] = str(job.pk)
        span = tracer.start_span(
            f"expire {job.queue}",
            context=parent,
            kind=api.trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        span.add_event("expired", {"reason": job.error or "expired"})
        span.end()


# -- logs ------------------------------------------------------------------------------------


class JobLogFilter(logging.Filter):
    """Adds the running job to each record written while it runs: ``job_id``, ``kind``,
    ``attempt``, ``queue`` and, when tracing, ``trace_id`` and ``span_id`` (hex), as ``extra``
    fields any handler or formatter can read. A record written outside a job passes as it is;
    a field the record already has is kept. The worker installs it on the handlers configured
    when it starts (``install_log_filter``); name it in ``LOGGING`` for handlers added later::

        "filters": {"job": {"()": "django_jobs.observability.tracing.JobLogFilter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["job"]}},
    """

    def filter(self, record: logging.LogRecord) -> bool:
        add_job_fields(record)
        return True


def add_job_fields(record: logging.LogRecord) -> None:
    running = CURRENT.get()
    if running is None:
        return
    job = running.job
    fields = record.__dict__
    for name, value in (
        ("job_id", job.pk),
        ("kind", job.kind),
        ("attempt", job.attempts),
        ("queue", job.queue),
    ):
        fields.setdefault(name, value)
    if running.trace is None:
        return
    api = _load()
    if api is None:
        return
    span_context = api.trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        span_context = api.trace.get_current_span(running.trace).get_span_context()
    fields.setdefault("trace_id", format(span_context.trace_id, "032x"))
    fields.setdefault("span_id", format(span_context.span_id, "016x"))


_FILTER = JobLogFilter()


def install_log_filter() -> None:
    """Add ``JobLogFilter`` to every handler configured now (the root logger's and every named
    logger's), once each: records written while a job runs then carry its fields."""
    loggers: list[Any] = [logging.getLogger()]
    loggers += [
        found
        for found in list(logging.Logger.manager.loggerDict.values())
        if isinstance(found, logging.Logger)
    ]
    for each in loggers:
        for handler in list(each.handlers):
            if not any(isinstance(f, JobLogFilter) for f in handler.filters):
                handler.addFilter(_FILTER)


__all__ = [
    "RELATIONSHIPS",
    "JobLogFilter",
    "add_job_fields",
    "configure",
    "enabled",
    "error_type",
    "expired",
    "install_log_filter",
    "link_children",
    "processing",
    "resume",
    "scheduled",
    "sending",
    "step",
    "step_replayed",
]
