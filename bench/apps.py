from __future__ import annotations

import os

from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # BENCH_LIVE_EVENTS=0 measures the engine alone: the live events receivers (one event
        # row per job.created, job.started, job.succeeded) are disconnected in this process.
        if os.environ.get("BENCH_LIVE_EVENTS", "1") == "0":
            from django_jobs import signals
            from django_jobs.engine.admission import set_created_events

            signals.job_event.disconnect(dispatch_uid="django_jobs.events.outbox")
            set_created_events(None)
