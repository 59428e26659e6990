from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

from bench.engine_paths import engine_module, engine_name


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
        # BENCH_TRACING (``bench.tracing``): off, api (the API, no SDK), sdk, sampled or floor.
        tracing_mode(os.environ.get("BENCH_TRACING", "api"))
        # The ``celery`` figures' task, where the engine measured has the layer (a revision
        # of ``--against`` may predate it). Looked for in the package imported, not by
        # ``find_spec``: an editable install's finder would answer with the working tree's.
        import django_jobs

        if any((Path(folder) / "celery").is_dir() for folder in django_jobs.__path__):
            import bench.celery_layer  # noqa: F401 - registers its task


def tracing_mode(mode: str) -> None:
    """``off``: as if ``opentelemetry-api`` were not installed; ``api``: installed, no SDK
    configured (the default here); ``sdk``: the SDK's TracerProvider, its batch processor
    exporting to an exporter that drops every span; ``sampled``: the same, keeping one trace
    in ten (``ParentBased(TraceIdRatioBased(0.1))``), as a busy production site would;
    ``floor``: the SDK as ``sdk``, each span bare (``bare_spans``)."""
    if mode == "off":
        tracing = engine_module("django_jobs.engine.observe.tracing")
        tracing._api = None  # what the module holds when the import failed
    elif mode in ("sdk", "sampled", "floor"):
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
        if mode == "floor":
            bare_spans()


def bare_spans() -> None:
    """Each enqueue's ``send`` span and each attempt's ``process`` span made bare: a name, no
    attribute, no link, no context stored or read; still made current and ended as the
    engine's are. The floor under any instrumentation: what the SDK costs for one span here,
    to read beside the ``sdk`` mode's full spans (``bench.tracing``)."""
    tracing = engine_module("django_jobs.engine.observe.tracing")

    def send_start(self: Any) -> None:
        self.span = self.tracer.start_span("send")

    def process_start(self: Any) -> None:
        api = tracing._load()
        self.span = self.tracer.start_span("process", context=api.context.Context())
        context = api.trace.set_span_in_context(self.span, api.context.Context())
        self.running.trace = context
        self.token = api.context.attach(context)

    tracing._Send._start = send_start  # type: ignore[method-assign]
    tracing._Send.sent = lambda self, jobs: None  # type: ignore[method-assign]
    tracing._Process._start = process_start  # type: ignore[method-assign]
    tracing._Process._ended = lambda self, outcome, exc: None  # type: ignore[method-assign]


def engine_alone() -> None:
    """Store no event rows in this process (``--live-events off``)."""
    try:
        store_events = engine_name("django_jobs.engine.rows.publish", "store_events")
    except ImportError:
        # An engine from before one event path (``--against`` an older revision): its
        # receiver and its insert's job.created had switches of their own.
        from django_jobs import signals

        set_created_events = engine_name("django_jobs.engine.rows.admission", "set_created_events")
        signals.job_event.disconnect(dispatch_uid="django_jobs.events.outbox")
        set_created_events(None)
        return
    store_events(False)
