"""The charts' rollups: each finished minute's jobs counted once, by one worker (SPEC §18).

``close_rollups`` moves the engine's mark (``RollupMark.closed_until``) forward to the last
finished minute with a conditional update: of several workers closing at the same time, one
moves it and the others find it moved and do nothing, so no minute is counted twice. Where the
database can (PostgreSQL), the mark's row is locked ``SKIP LOCKED`` first: a worker that finds
another closing passes at once instead of waiting for it. The
worker that moved it reads the jobs that ended between the old and the new mark with one
aggregate query on the ``ended_at`` index (grouped by minute, queue, kind, final state and
duration bucket: a few hundred rows for thousands of jobs) and inserts a ``JobRollup`` row per
minute, queue and kind. Nothing is done per job: the drain's statements are untouched.

Each close also samples every queue's depth and oldest due queued job into the queue's own row
(kind ``""``) of the last minute closed, and folds each quarter hour and each hour that
finished into one row of ``span`` 900 or 3600, so a day's chart reads 96 rows per queue and
kind instead of 1,440, and a week's 168 instead of 10,080.

A minute closes ``GRACE`` after its end (a worker records its outcomes in batches, at most a
fraction of a second late); a job whose end is written later than that (a worker cut off from
its database for longer) is left out of the charts. After a stop of the whole fleet, the
minutes missed are closed up to ``CATCH_UP`` at a time; the first close of an engine starts an
hour back.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import OperationalError, connections, transaction
from django.db.models import Count, Min, Q

from ... import clock
from ...conf import jobs_settings
from ...histograms import EDGE, MAX_BUCKET, PER_DOUBLING, merge
from ...models import Job, JobRollup, RollupMark
from ...states import JobState
from .cadence import Duty, Retry

logger = logging.getLogger("django_jobs.worker")

__all__ = ["CATCH_UP", "GRACE", "ROLLUP_EVERY", "Rollups", "close_rollups"]

#: Seconds between a worker's looks at the mark (a minute closes within this of its GRACE).
ROLLUP_EVERY = 10.0
#: How long after its end a minute is closed.
GRACE = timedelta(seconds=5)
#: The most minutes one close reads.
CATCH_UP = 60
MINUTE = timedelta(minutes=1)
#: PostgreSQL: the longest a close waits on another worker's lock (the mark's first insert, a
#: minute's rows) before it leaves those minutes to that worker. Without it, a worker cut off
#: from the server inside its close (its transaction open there until the server notices)
#: held every other worker's keeper thread, and its outcomes, for as long.
LOCK_WAIT = "200ms"
#: The coarser spans each finished one of which is folded into a row: quarter hours (the 24 h
#: chart's buckets) and hours (the week's).
FOLDED = (900, 3600)

_WHY = {1: "timeouts", 2: "lost"}


def floor_minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def close_rollups(
    engine: str = "default", *, now: datetime | None = None, using: str | None = None
) -> int:
    """Close the finished minutes of ``engine`` not closed yet (up to ``CATCH_UP``); return
    how many this call closed (0: none was due, or another worker closed them or holds them
    now)."""
    alias = using or jobs_settings.DATABASE
    try:
        return _close(engine, now or clock.now(), alias)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        return 0  # another worker's transaction holds them: its minutes, or the next look's


def _close(engine: str, now: datetime, alias: str) -> int:
    end = floor_minute(now - GRACE)
    marks = RollupMark.objects.using(alias)
    mark = marks.filter(engine=engine)
    if connections[alias].features.has_select_for_update_skip_locked:
        # A worker closing minutes holds the mark's row: the others pass, rather than hold
        # their keeper thread (and its outcomes) until it is done.
        mark = mark.select_for_update(skip_locked=True)
    # Within a transaction of the caller's, SET LOCAL would outlive this close: none then.
    bounded = connections[alias].vendor == "postgresql" and not connections[alias].in_atomic_block
    with transaction.atomic(using=alias):
        if bounded:
            with connections[alias].cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
        start = mark.values_list("closed_until", flat=True).first()
        if start is None:
            if marks.filter(engine=engine).exists():
                return 0  # another worker is closing minutes now
            marks.bulk_create(
                [RollupMark(engine=engine, closed_until=end - CATCH_UP * MINUTE)],
                ignore_conflicts=True,
            )
            start = mark.values_list("closed_until", flat=True).first()
            if start is None:
                return 0
        start = start.astimezone(UTC)
        if start >= end:
            return 0
        stop = min(end, start + CATCH_UP * MINUTE)
        if not marks.filter(engine=engine, closed_until=start).update(closed_until=stop):
            return 0  # another worker moved it: those minutes are its
        rows = _minute_rows(alias, engine, start, stop)
        if stop == end:
            _sample_queues(alias, engine, stop - MINUTE, now, rows)
        JobRollup.objects.using(alias).bulk_create(rows.values(), ignore_conflicts=True)
        for span in FOLDED:
            length = timedelta(seconds=span)
            fold = _floor(start, span)
            while fold + length <= stop:
                if fold + length > start:
                    _fold(alias, engine, fold, span)
                fold += length
    return int((stop - start) / MINUTE)


def _bucket_sql(vendor: str, later: str, earlier: str) -> str:
    """The histogram bucket (``django_jobs.histograms.bucket_of``) of ``later - earlier``."""
    if vendor == "postgresql":
        ms = f"(EXTRACT(EPOCH FROM ({later} - {earlier})) * 1000)"
        return f"LEAST({MAX_BUCKET}, FLOOR(LN(GREATEST({ms}, 1)) * %s + {EDGE!r}))::int"
    # SQLite: julianday() keeps milliseconds only; the whole seconds from it (rounded), the
    # microseconds from the stored text ("YYYY-MM-DD HH:MM:SS.ffffff").
    seconds = (
        f"(ROUND((julianday(substr({later}, 1, 19)) - julianday(substr({earlier}, 1, 19))) "
        f"* 86400) + CAST(substr({later}, 20) AS REAL) - CAST(substr({earlier}, 20) AS REAL))"
    )
    ms = f"({seconds} * 1000.0)"
    return f"CAST(MIN({MAX_BUCKET}, FLOOR(LN(MAX({ms}, 1)) * %s + {EDGE!r})) AS INTEGER)"


def _minute_rows(
    alias: str, engine: str, start: datetime, stop: datetime
) -> dict[tuple[datetime, str, str], JobRollup]:
    """The rows of the minutes in [start, stop): one aggregate query over the jobs ended."""
    connection = connections[alias]
    vendor = connection.vendor
    table = connection.ops.quote_name(Job._meta.db_table)
    if vendor == "postgresql":
        minute = "FLOOR(EXTRACT(EPOCH FROM ended_at) / 60)::bigint"
    else:
        minute = "CAST(strftime('%%s', ended_at) AS INTEGER) / 60"
    scale = PER_DOUBLING / math.log(2)
    runtime = _bucket_sql(vendor, "ended_at", "started_at")
    pickup = _bucket_sql(vendor, "started_at", "run_at")
    sql = (
        f"SELECT {minute}, queue, kind, state, "
        "CASE WHEN state = %s AND error LIKE %s THEN 1 "
        "WHEN state = %s AND error LIKE %s THEN 2 ELSE 0 END, "
        f"CASE WHEN started_at IS NOT NULL THEN {runtime} END, "
        "CASE WHEN attempts = 1 AND started_at IS NOT NULL AND run_at IS NOT NULL "
        f"THEN {pickup} END, COUNT(*) FROM {table} "
        "WHERE ended_at >= %s AND ended_at < %s AND engine = %s AND state IN (%s, %s, %s) "
        "AND NOT timestamps_derived GROUP BY 1, 2, 3, 4, 5, 6, 7"
    )
    failed = JobState.FAILED.value
    params: list[Any] = [failed, "JOB_TIMEOUT%", failed, "WORKER_LOST%", scale, scale]
    adapt = connection.ops.adapt_datetimefield_value
    params += [adapt(start), adapt(stop), engine]
    params += [JobState.SUCCEEDED.value, failed, JobState.CANCELLED.value]
    rows: dict[tuple[datetime, str, str], JobRollup] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for epoch_minute, queue, kind, state, why, rb, pb, n in cursor.fetchall():
            at = datetime.fromtimestamp(int(epoch_minute) * 60, UTC)
            row = rows.get((at, queue, kind))
            if row is None:
                row = rows[at, queue, kind] = JobRollup(
                    minute=at, span=60, engine=engine, queue=queue, kind=kind, runtime={}, pickup={}
                )
            if state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
                setattr(row, state, getattr(row, state) + n)
            if why:
                setattr(row, _WHY[why], getattr(row, _WHY[why]) + n)
            if rb is not None:
                row.runtime[str(rb)] = row.runtime.get(str(rb), 0) + n
            if pb is not None:
                row.pickup[str(pb)] = row.pickup.get(str(pb), 0) + n
    return rows


def _sample_queues(
    alias: str,
    engine: str,
    minute: datetime,
    now: datetime,
    rows: dict[tuple[datetime, str, str], JobRollup],
) -> None:
    """Each queue's depth and oldest due queued job, as of ``now``, in its row of ``minute``;
    the queues that ended jobs in it and have none queued read 0."""
    queued = (
        Job.objects.using(alias)
        .filter(engine=engine, state=JobState.QUEUED)
        .order_by()
        .values("queue")
        .annotate(n=Count("id"), oldest=Min("run_at", filter=Q(run_at__lte=now)))
    )
    sampled = {r["queue"]: (r["n"], r["oldest"]) for r in queued}
    for _, queue, _ in list(rows):
        sampled.setdefault(queue, (0, None))
    for queue, (n, oldest) in sampled.items():
        rows[minute, queue, ""] = row = rows.get((minute, queue, "")) or JobRollup(
            minute=minute, span=60, engine=engine, queue=queue, kind="", runtime={}, pickup={}
        )
        row.depth = n
        row.oldest_age_s = max((now - oldest).total_seconds(), 0.0) if oldest else 0.0


def _floor(moment: datetime, span: int) -> datetime:
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % span, UTC)


def _fold(alias: str, engine: str, start: datetime, span: int) -> None:
    """One row of ``span`` seconds per queue and kind: the span's minute rows added up (depth
    and age: the span's highest)."""
    minutes = JobRollup.objects.using(alias).filter(
        span=60, engine=engine, minute__gte=start, minute__lt=start + timedelta(seconds=span)
    )
    groups: dict[tuple[str, str], list[JobRollup]] = {}
    for row in minutes:
        groups.setdefault((row.queue, row.kind), []).append(row)
    JobRollup.objects.using(alias).bulk_create(
        [summed(rows, minute=start, span=span) for rows in groups.values()],
        ignore_conflicts=True,
    )


def summed(rows: Iterable[JobRollup], *, minute: datetime, span: int) -> JobRollup:
    """One row of these rows (same engine, queue and kind): counts and histograms added."""
    rows = list(rows)
    first = rows[0]
    depths = [r.depth for r in rows if r.depth is not None]
    ages = [r.oldest_age_s for r in rows if r.oldest_age_s is not None]
    return JobRollup(
        minute=minute,
        span=span,
        engine=first.engine,
        queue=first.queue,
        kind=first.kind,
        succeeded=sum(r.succeeded for r in rows),
        failed=sum(r.failed for r in rows),
        cancelled=sum(r.cancelled for r in rows),
        timeouts=sum(r.timeouts for r in rows),
        lost=sum(r.lost for r in rows),
        runtime=merge(r.runtime for r in rows),
        pickup=merge(r.pickup for r in rows),
        depth=max(depths) if depths else None,
        oldest_age_s=max(ages) if ages else None,
    )


class Rollups(Duty):
    """Close the finished minutes of the worker's engine for the charts (``close_rollups``):
    every worker looks, the one that moves the mark does the minute."""

    def __init__(self, retry: Retry, *, engine: str, alias: str) -> None:
        # The first look on the keeper's first round: a burst worker that drains for a second
        # closes what ended since the fleet last looked.
        super().__init__(every=ROLLUP_EVERY, first=0.0)
        self.retry = retry
        self.engine = engine
        self.alias = alias

    def run_once(self) -> None:
        try:
            self.retry(lambda: close_rollups(self.engine, using=self.alias))
        except Exception:  # the charts must never stop the worker
            logger.exception("Closing the charts' minutes failed; retrying in %ss.", ROLLUP_EVERY)
