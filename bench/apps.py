from __future__ import annotations

import os

from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # BENCH_LIVE_EVENTS=0 measures the engine alone: no event row (one per job.created,
        # job.started, job.succeeded) is stored in this process.
        if os.environ.get("BENCH_LIVE_EVENTS", "1") == "0":
            from django_jobs.engine.publish import store_events

            store_events(False)
