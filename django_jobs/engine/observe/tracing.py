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

This module is the seams' door: it loads the API once (``_api``; None when it is not
installed) and hands it, with the tracer, to the spans (``spans.py``); which provider, and
the metric instruments, are ``providers.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...checks import TRACE_RELATIONSHIPS
from . import providers
from .providers import Api, Instruments, configure
from .spans import (
    NO_PROCESS,
    NO_SEND,
    NO_STEP,
    PREVIOUS,
    TRACEPARENT,
    NoProcess,
    NoSend,
    Process,
    Send,
    error_type,
    messaging_attributes,
    scheduled,
    step_span,
    stored_context,
)

if TYPE_CHECKING:
    from ...models import Job
    from ...store import NewJob
    from .running import Running

RELATIONSHIPS = TRACE_RELATIONSHIPS  # JOBS["TRACE_RELATIONSHIP"]'s values

_UNSET: Any = object()
_api: Any = _UNSET  # the opentelemetry modules, loaded on first use (None: not installed)

# The spans by the names ``bench.apps`` patches their methods through.
_Send, _Process = Send, Process


def _load() -> Api | None:
    global _api
    if _api is _UNSET:
        try:
            _api = Api()
        except ImportError:
            _api = None
    return _api  # type: ignore[no-any-return]


def preload() -> None:
    """Import the OpenTelemetry API now rather than at the first job: a worker processes'
    template does it once for every process it forks. Reads no provider (an SDK's would start
    threads) and does nothing without the API."""
    _load()


def _tracer() -> Any:
    """The tracer to use, or None when tracing is off (no API, or no provider configured)."""
    api = _load()
    if api is None:
        return None
    return providers.tracer(api)


def _instruments() -> Instruments | None:
    """The metric instruments, or None when no MeterProvider is configured."""
    api = _load()
    if api is None:
        return None
    return providers.instruments(api)


def enabled() -> bool:
    """Are spans emitted now?"""
    return _tracer() is not None


# -- send ------------------------------------------------------------------------------------


def sending(rows: Sequence[NewJob]) -> NoSend:
    """A context manager around the admission of ``rows``: a ``send`` span whose context each
    row stores (``trace_context``); call ``.sent(jobs)`` with the jobs admitted."""
    tracer, instruments = _tracer(), _instruments()
    if tracer is None and instruments is None:
        return NO_SEND
    api = _load()
    assert api is not None
    return Send(api, tracer, instruments, rows)


# -- process ---------------------------------------------------------------------------------


def processing(job: Job, running: Running) -> NoProcess:
    """A context manager around one attempt of ``job``: its ``process`` span, current while the
    runner runs; call ``.ended(outcome, exc)`` with what the attempt came to."""
    tracer, instruments = _tracer(), _instruments()
    if tracer is None and instruments is None:
        return NO_PROCESS
    api = _load()
    assert api is not None
    return Process(api, tracer, instruments, job, running)


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
        child = stored_context(api, each, PREVIOUS)
        if child is not None:
            add_link(child, {"messaging.django_jobs.link": "child"})


# -- steps -----------------------------------------------------------------------------------


def step(name: str) -> Any:
    """A context manager around a step's activity: a ``step {name}`` span under the attempt's."""
    tracer = _tracer()
    if tracer is None:
        return NO_STEP
    api = _load()
    assert api is not None
    return step_span(api, tracer, name)


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
        sent = stored_context(api, job.trace_context, TRACEPARENT)
        if sent is None:
            continue
        parent = api.trace.set_span_in_context(
            api.trace.NonRecordingSpan(sent), api.context.Context()
        )
        attributes = messaging_attributes("settle", "settle", job.queue, job.kind)
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


def span_ids(running: Running) -> tuple[str, str] | None:
    """The trace and span ids (hex, as trace backends show them) of the current span of the
    job ``running`` (its attempt's, or a step's inside it), for its log records
    (``records``); None when tracing is off."""
    api = _load()
    if api is None:
        return None
    span_context = api.trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        span_context = api.trace.get_current_span(running.trace).get_span_context()
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


__all__ = [
    "RELATIONSHIPS",
    "configure",
    "enabled",
    "error_type",
    "expired",
    "link_children",
    "processing",
    "resume",
    "scheduled",
    "sending",
    "span_ids",
    "step",
    "step_replayed",
]
