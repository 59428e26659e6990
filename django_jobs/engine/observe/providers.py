"""The OpenTelemetry plumbing under the jobs' spans and metrics: the pieces of the API, and
the tracer and the metric instruments of the provider in use.

``engine.observe.tracing`` loads the API (``Api``) once and hands it to ``tracer`` and
``instruments`` on each use: None from them means tracing, or metrics, are off. Which
provider: ``configure``'s, then ``JOBS["TRACER_PROVIDER"]`` (tracer only), then
OpenTelemetry's global one; a placeholder (the API's proxy, a no-op) counts as none.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

from django.utils.module_loading import import_string

from ...conf import jobs_settings
from ...states import JobState

SYSTEM = "django_jobs"

_UNSET: Any = object()
_provider: Any = None  # configure()'s
_meter_provider: Any = None  # configure()'s
# The last provider asked and what it gave (None: a placeholder), so that the check made on
# every enqueue and attempt is a few reads; and every provider's, kept (id -> both).
_last_tracer: tuple[Any, Any] = (_UNSET, None)
_last_meter: tuple[Any, Any] = (_UNSET, None)
_tracers: dict[int, tuple[Any, Any]] = {}
_meters: dict[int, tuple[Any, Instruments | None]] = {}
_imported: dict[str, Any] = {}  # JOBS["TRACER_PROVIDER"] as an import string -> the provider


class Api:
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


def configure(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Use ``tracer_provider`` for the jobs' spans (None: back to ``JOBS["TRACER_PROVIDER"]``,
    then OpenTelemetry's global provider), and ``meter_provider`` for their metrics (None:
    the global one). Tests pass their own, with in-memory exporters and readers."""
    global _provider, _meter_provider, _last_tracer, _last_meter
    _provider, _meter_provider = tracer_provider, meter_provider
    _last_tracer = _last_meter = (_UNSET, None)
    _imported.clear()


def tracer(api: Api) -> Any:
    """The tracer to use, or None when tracing is off (no provider configured)."""
    global _last_tracer
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


class Instruments:
    """The jobs' metrics (messaging semantic conventions); attributes never name a job."""

    def __init__(self, meter: Any, api: Api) -> None:
        self.api = api
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
            callbacks=[self._queue_depth],
            unit="{message}",
            description="Queued jobs per queue (due now or later), read at collection.",
        )

    def _queue_depth(self, options: Any) -> Iterator[Any]:
        """The gauge's callback: one count per queue (a read of the job table)."""
        from django.db import DatabaseError, connections
        from django.db.models import Count

        from ...models import Job

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
            yield self.api.metrics.Observation(
                count, {"messaging.system": SYSTEM, "messaging.destination.name": queue}
            )


def instruments(api: Api) -> Instruments | None:
    """The metric instruments, or None when no MeterProvider is configured."""
    global _last_meter
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
        found = (provider, Instruments(provider.get_meter("django_jobs"), api) if real else None)
        _meters[id(provider)] = found
    _last_meter = found
    return found[1]
