"""The charts over time (SPEC §18): series read from the per-minute rollups (``JobRollup``).

``chart_series(window, queue=, kind=)`` is what ``GET charts/`` returns and what the admin's
Charts page draws: for each bucket of the window (1 h: minutes; 24 h: quarter hours; 7 d:
hours), jobs succeeded and failed, runtime p50/p95 per kind, pickup latency p50/p95, and per
queue the depth and the oldest queued job's age as sampled when its minutes closed. One query
on the rollups' index: the hour rows for a week (168 per queue and kind), the minute rows for
the last hour and for the shorter windows; the percentiles are merged from the rows'
histograms (``django_jobs.histograms``). The minute still going is not in it: a minute shows
once a worker closed it, a few seconds after it ended.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Min, Q

from .. import clock
from ..conf import jobs_settings
from ..exceptions import JobsError
from ..histograms import Histogram, merge, quantiles
from ..models import JobRollup, RollupMark
from ..states import JobState

__all__ = ["WINDOWS", "InvalidChart", "chart_series"]

#: Each window: its length and its bucket, in seconds.
WINDOWS: dict[str, tuple[int, int]] = {
    "1h": (3600, 60),
    "24h": (86400, 900),
    "7d": (7 * 86400, 3600),
}

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


class InvalidChart(JobsError, ValueError):
    """A chart's parameter is malformed: ``errors`` names each and says what to send."""

    code = "INVALID_FILTER"

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__(" ".join(f"{name}: {text}" for name, text in self.errors.items()))


def chart_series(
    window: str = "1h",
    *,
    queue: str | None = None,
    kind: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The series of ``window`` ("1h", "24h" or "7d"), for one queue and/or kind if given."""
    errors = {}
    if window not in WINDOWS:
        errors["window"] = f"{window!r} is not a window: send 1h, 24h or 7d."
    for name, value in (("queue", queue), ("kind", kind)):
        if value is not None and (
            not value.strip() or len(value) > 200 or _CONTROL.search(value) is not None
        ):
            errors[name] = (
                f"{value!r} is not a {name}'s name: send up to 200 printable characters, or "
                f"leave {name} out for every {name}."
            )
    if errors:
        raise InvalidChart(errors)
    length, step = WINDOWS[window]
    now = (now or clock.now()).astimezone(UTC)
    last = _floor(now, step)
    since = last - timedelta(seconds=step * (length // step - 1))
    n = length // step
    rows = _rows(since, step)
    succeeded, failed = [0] * n, [0] * n
    runtime: dict[str, list[list[Histogram]]] = {}
    pickup: list[list[Histogram]] = [[] for _ in range(n)]
    depth: dict[str, list[int | None]] = {}
    oldest: dict[str, list[float | None]] = {}
    queues, kinds = set(), set()
    for minute, row_queue, row_kind, ok, bad, run, pick, row_depth, age in rows:
        queues.add(row_queue)
        if row_kind:
            kinds.add(row_kind)
        if queue is not None and row_queue != queue:
            continue
        i = int((minute - since).total_seconds()) // step
        if not 0 <= i < n:
            continue
        if row_depth is not None:
            series = depth.setdefault(row_queue, [None] * n)
            series[i] = max(series[i] or 0, row_depth)
            ages = oldest.setdefault(row_queue, [None] * n)
            ages[i] = max(ages[i] or 0.0, age or 0.0)
        if not row_kind or (kind is not None and row_kind != kind):
            continue
        succeeded[i] += ok
        failed[i] += bad
        if run:
            per_kind = runtime.get(row_kind)
            if per_kind is None:
                per_kind = runtime[row_kind] = [[] for _ in range(n)]
            per_kind[i].append(run)
        if pick:
            pickup[i].append(pick)
    return {
        "window": window,
        "bucket_s": step,
        "queue": queue,
        "kind": kind,
        "buckets": [(since + timedelta(seconds=step * i)).isoformat() for i in range(n)],
        "jobs": {JobState.SUCCEEDED: succeeded, JobState.FAILED: failed},
        "runtime_ms": {k: _percentiles(runtime[k]) for k in sorted(runtime)},
        "pickup_ms": _percentiles(pickup),
        "queues": {q: {"depth": depth[q], "oldest_age_s": oldest[q]} for q in sorted(depth)},
        "choices": {"queues": sorted(queues), "kinds": sorted(kinds)},
        "at": now.isoformat(),
    }


def _floor(moment: datetime, step: int) -> datetime:
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % step, UTC)


def _rows(since: datetime, step: int) -> list[tuple[Any, ...]]:
    """The rollup rows from ``since``: the rows of the bucket's span (quarter hours, hours)
    where those are folded, the minute rows after them (and for the minute buckets)."""
    rollups = JobRollup.objects.using(jobs_settings.DATABASE).order_by()
    # The count columns are named for the states they count.
    columns = (
        "minute", "queue", "kind", JobState.SUCCEEDED, JobState.FAILED, "runtime", "pickup",
        "depth", "oldest_age_s",
    )  # fmt: skip
    if step == 60:
        return list(rollups.filter(span=60, minute__gte=since).values_list(*columns))
    marks = RollupMark.objects.using(jobs_settings.DATABASE)
    closed = marks.aggregate(until=Min("closed_until"))["until"]
    folded = _floor(closed, step) if closed is not None else since
    wanted = Q(span=step, minute__gte=since, minute__lt=folded) | Q(
        span=60, minute__gte=max(folded, since)
    )
    return list(rollups.filter(wanted).values_list(*columns))


def _percentiles(buckets: list[list[Histogram]]) -> dict[str, list[float | None]]:
    p50: list[float | None] = []
    p95: list[float | None] = []
    for histograms in buckets:
        if not histograms:
            p50.append(None)
            p95.append(None)
            continue
        merged = histograms[0] if len(histograms) == 1 else merge(histograms)
        middle, high = quantiles(merged, (0.5, 0.95))
        p50.append(_round(middle))
        p95.append(_round(high))
    return {"p50": p50, "p95": p95}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
