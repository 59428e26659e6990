"""Queue statistics: counts per queue and state, oldest due age, pickup latency."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Min

from . import clock
from .conf import jobs_settings
from .models import Job

LATENCY_SAMPLE = 1000


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def queue_stats(queryset: Any = None) -> dict[str, Any]:
    """What ``GET stats/`` returns. ``queryset`` narrows the jobs (a member's own)."""
    jobs = queryset if queryset is not None else Job.objects.using(jobs_settings.DATABASE)
    now = clock.now()
    queues: dict[str, dict[str, Any]] = {}
    for row in jobs.order_by().values("queue", "state").annotate(n=Count("id")):
        entry = queues.setdefault(row["queue"], {"queue": row["queue"], "states": {}})
        entry["states"][row["state"]] = row["n"]
    due = (
        jobs.order_by()
        .filter(state__in=("queued", "waiting"), run_at__lte=now)
        .values("queue")
        .annotate(oldest=Min("run_at"))
    )
    for row in due:
        entry = queues.setdefault(row["queue"], {"queue": row["queue"], "states": {}})
        entry["oldest_due_age_s"] = (now - row["oldest"]).total_seconds()
    for entry in queues.values():
        entry.setdefault("oldest_due_age_s", None)
    recent = (
        jobs.filter(started_at__isnull=False, run_at__isnull=False, timestamps_derived=False)
        .order_by("-id")
        .values_list("run_at", "started_at")[:LATENCY_SAMPLE]
    )
    latencies = sorted(
        max((started - run_at).total_seconds() * 1000, 0.0) for run_at, started in recent
    )
    return {
        "queues": sorted(queues.values(), key=lambda e: e["queue"]),
        "pickup_latency_ms": {
            "p50": percentile(latencies, 0.50),
            "p95": percentile(latencies, 0.95),
            "p99": percentile(latencies, 0.99),
            "sample": len(latencies),
        },
        "at": now.isoformat(),
    }
