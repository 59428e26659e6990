from __future__ import annotations

import os
from pathlib import Path

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # BENCH_ENGINE (set by ``--against`` for each side): the django_jobs folder this
        # process must have imported. A side measuring the other side's engine would compare
        # an engine with itself, so it stops instead.
        expected = os.environ.get("BENCH_ENGINE")
        if expected:
            import django_jobs

            found = Path(django_jobs.__file__).resolve().parent
            if found != Path(expected).resolve():
                raise ImproperlyConfigured(
                    f"bench: django_jobs imported from {found}, not from {expected}."
                )
        # BENCH_LIVE_EVENTS=0 measures the engine alone: no event row (one per job.created,
        # job.started, job.succeeded) is stored in this process.
        if os.environ.get("BENCH_LIVE_EVENTS", "1") == "0":
            engine_alone()
        # BENCH_TRACING (``bench.tracing``): off, api (the API, no SDK) or sdk.
        tracing_mode(os.environ.get("BENCH_TRACING", "api"))


def tracing_mode(mode: str) -> None:
    """``off``: as if ``opentelemetry-api`` were not installed; ``api``: installed, no SDK
    configured (the default here); ``sdk``: the SDK's TracerProvider, its batch processor
    exporting to an exporter that drops every span; ``sampled``: the same, keeping one trace
    in ten (``ParentBased(TraceIdRatioBased(0.1))``), as a busy production site would."""
    if mode == "off":
        from django_jobs.engine import tracing

        tracing._api = None  # what the module holds when the import failed
    elif mode in ("sdk", "sampled"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        class Dropped(SpanExporter):
            def export(self, spans):  # type: ignore[no-untyped-def]
                return SpanExportResult.SUCCESS

        sampler = ParentBased(TraceIdRatioBased(0.1)) if mode == "sampled" else None
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(BatchSpanProcessor(Dropped()))
        trace.set_tracer_provider(provider)


def engine_alone() -> None:
    """Store no event rows in this process (``--live-events off``)."""
    try:
        from django_jobs.engine.publish import store_events
    except ImportError:
        # An engine from before one event path (``--against`` an older revision): its
        # receiver and its insert's job.created had switches of their own.
        from django_jobs import signals
        from django_jobs.engine.admission import set_created_events  # type: ignore[attr-defined]

        signals.job_event.disconnect(dispatch_uid="django_jobs.events.outbox")
        set_created_events(None)
        return
    store_events(False)
