"""Queue statistics: counts per queue and state, oldest due age, pickup latency, throughput."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Min
from django.db.models.functions import TruncMinute

from .. import clock
from ..conf import jobs_settings
from ..models import Job
from ..states import JobState

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
        .filter(state__in=(JobState.QUEUED, JobState.WAITING), run_at__lte=now)
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
        max((started - run_at).total_seconds() * 1000, 0.0)
        for run_at, started in recent
        if run_at is not None and started is not None  # filtered above: for the type checker
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


#: The states a job ends in, counted by ``throughput()``.
_ENDED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


def throughput(minutes: int = 10, queryset: Any = None) -> dict[str, Any]:
    """Jobs ended per minute over the last ``minutes`` minutes (UTC minutes, oldest first).

    The last entry is the current minute, still filling up. Rows whose timestamps were derived
    (imported rows, ``timestamps_derived``) are left out, as for the latency percentiles: their
    end time is an estimate. One query, on the ``ended_at`` index.
    """
    if minutes < 1:
        raise ValueError(f"minutes={minutes!r} must be 1 or more.")
    jobs = queryset if queryset is not None else Job.objects.using(jobs_settings.DATABASE)
    now = clock.now()
    current = now.astimezone(UTC).replace(second=0, microsecond=0)
    start = current - timedelta(minutes=minutes - 1)
    rows = (
        jobs.order_by()
        .filter(ended_at__gte=start, ended_at__lte=now, timestamps_derived=False)
        .annotate(minute=TruncMinute("ended_at", tzinfo=UTC))
        .values("minute", "state")
        .annotate(n=Count("id"))
    )
    counts: dict[datetime, dict[str, int]] = {}
    for row in rows:
        minute = row["minute"].astimezone(UTC)
        counts.setdefault(minute, {})[row["state"]] = row["n"]
    buckets = []
    for i in range(minutes):
        minute = start + timedelta(minutes=i)
        by_state = counts.get(minute, {})
        bucket: dict[str, Any] = {"minute": minute.isoformat()}
        bucket.update({state: by_state.get(state, 0) for state in _ENDED})
        bucket["ended"] = sum(by_state.values())
        buckets.append(bucket)
    total = sum(b["ended"] for b in buckets)
    return {
        "minutes": buckets,
        "ended": total,
        "per_minute": total / minutes,
        "at": now.isoformat(),
    }


def expired_leases(queryset: Any = None) -> int:
    """Running jobs whose lease ran out: their worker stopped heartbeating (gone or stuck).

    A worker of their engine re-asks them at its next rescue; until then they hold their slot.
    """
    jobs = queryset if queryset is not None else Job.objects.using(jobs_settings.DATABASE)
    return jobs.order_by().filter(state=JobState.RUNNING, leased_until__lt=clock.now()).count()
