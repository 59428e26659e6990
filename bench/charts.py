"""The charts' cost at 1M and 10M jobs: a week's chart read from the rollups, and the rollup
duty's close of one minute (``python -m bench.charts``).

Usage, from the repository root, with a local PostgreSQL::

    python -m bench.charts                          # 1,000,000 and 10,000,000 ended jobs
    python -m bench.charts --jobs 1000000 --runs 9

For each count the job table is emptied and filled with that many ended jobs spread evenly over
the last 7 days (six kinds, three queues, one in fifty failed; runtimes up to a second, pickups
up to 200 ms) in one ``INSERT ... SELECT ... generate_series`` that copies a real job's row.
The rollups of those 7 days are then made by the duty itself (``close_rollups``, an hour of
minutes per call, as after a stop of the fleet), and timed. Then, each ``--runs`` times (the
median is printed):

- ``chart 7d`` / ``7d queue`` / ``7d kind``: ``chart_series("7d")`` unfiltered, for one queue,
  for one kind: the query of the hour rows and the merge of their histograms (goal: 50 ms);
- ``chart 24h``, ``chart 1h``: the same over the minute rows;
- ``close a minute``: the duty's close of the minute that just ended (about N / 10,080 jobs):
  its aggregate query on the ``ended_at`` index, the queue sample and the insert.

Each figure is the wall clock and, in brackets, the benchmark process's CPU time (the
database's own time is in the wall clock only).

The database is ``jobs_bench_charts`` (``--database-url`` or ``BENCH_DATABASE_URL``; the name
must contain "bench": every run empties the job table).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import prepare_database, reset, sql  # noqa: E402 - needs the root first

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jobs_bench_charts"
TABLE = "django_jobs_job"
KINDS = 6
QUEUES = 3
WEEK = 7 * 86400


def fill(count: int, now: datetime) -> float:
    """``count`` ended jobs over the week before ``now``; return rows inserted per second."""
    from django.db import connection

    from bench.jobs import noop

    template = noop.enqueue({"template": True})
    columns = [
        name
        for (name,) in sql(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = %s AND table_schema = current_schema() ORDER BY ordinal_position",
            [TABLE],
        )
        if name != "id"
    ]
    ended = "(%(start)s::timestamptz + (g * %(step)s) * interval '1 microsecond')"
    started = f"({ended} - (g %% 1000) * interval '1 millisecond')"
    due = f"({started} - ((g * 7) %% 200) * interval '1 millisecond')"
    replaced = {
        "kind": f"'bench.kind' || (g %% {KINDS})",
        "queue": f"'q' || (g %% {QUEUES})",
        "state": "CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'succeeded' END",
        "attempts": "1",
        "payload": "jsonb_build_object('n', g)",
        "result": "NULL",
        "idempotency_key": "NULL",
        "worker_id": "NULL",
        "leased_until": "NULL",
        "run_at": due,
        "created_at": due,
        "started_at": started,
        "first_started_at": started,
        "ended_at": ended,
    }
    select = ", ".join(replaced.get(name, f"t.{name}") for name in columns)
    start = now - timedelta(seconds=WEEK)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} ({', '.join(columns)}) SELECT {select} "
            f"FROM {TABLE} AS t, generate_series(1, %(count)s) AS g WHERE t.id = %(id)s",
            {"count": count, "id": template.pk, "start": start, "step": WEEK * 1e6 / count},
        )
        cursor.execute(f"DELETE FROM {TABLE} WHERE id = %s", [template.pk])
        rate = count / (time.perf_counter() - began)
        cursor.execute(f"VACUUM ANALYZE {TABLE}")
    return rate


def roll_up(now: datetime) -> tuple[int, float]:
    """The week's rollups, made by the duty from a mark a week back: (minutes, seconds)."""
    from django_jobs.engine.maintenance.rollups import close_rollups, floor_minute
    from django_jobs.models import JobRollup, RollupMark

    JobRollup.objects.all().delete()
    RollupMark.objects.all().delete()
    RollupMark.objects.create(
        engine="default", closed_until=floor_minute(now) - timedelta(seconds=WEEK)
    )
    began = time.perf_counter()
    minutes = 0
    while closed := close_rollups(now=now):
        minutes += closed
    spent = time.perf_counter() - began
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE django_jobs_jobrollup")
    return minutes, spent


def timed(fn: Any, runs: int) -> tuple[float, float]:
    """The median milliseconds of ``fn()`` over ``runs`` calls, after one to warm up: wall
    clock, and this process's CPU time (which the load of other processes disturbs less)."""
    fn()
    walls, cpus = [], []
    for _ in range(runs):
        began, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - began) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def measure(count: int, runs: int) -> dict[str, Any]:
    from django_jobs.engine.maintenance.rollups import close_rollups
    from django_jobs.models import JobRollup
    from django_jobs.observability.charts import chart_series

    reset()
    now = datetime.now(UTC).replace(second=30, microsecond=0)
    figures: dict[str, Any] = {"jobs": count, "insert_rate": fill(count, now)}
    figures["minutes"], figures["roll_up_s"] = roll_up(now)
    figures["rollup_rows"] = JobRollup.objects.count()
    for name, call in (
        ("chart 7d", lambda: chart_series("7d", now=now)),
        ("7d queue", lambda: chart_series("7d", queue="q1", now=now)),
        ("7d kind", lambda: chart_series("7d", kind="bench.kind2", now=now)),
        ("chart 24h", lambda: chart_series("24h", now=now)),
        ("chart 1h", lambda: chart_series("1h", now=now)),
    ):
        figures[name] = timed(call, runs)
    week = chart_series("7d", now=now)
    figures["week_jobs"] = sum(week["jobs"]["succeeded"]) + sum(week["jobs"]["failed"])
    # The steady state: each run closes the minute after the last one closed.
    later = [now]

    def close_next() -> None:
        later[0] += timedelta(minutes=1)
        assert close_rollups(now=later[0]) == 1

    figures["close a minute"] = timed(close_next, runs)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.charts", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--jobs", default="1000000,10000000", help="comma-separated job counts")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    prepare_database(args.database_url)
    names = ["chart 7d", "7d queue", "7d kind", "chart 24h", "chart 1h", "close a minute"]
    rows = []
    for count in (int(part) for part in args.jobs.split(",") if part.strip()):
        print(f"{count:,} ended jobs over 7 days", flush=True)
        figures = measure(count, args.runs)
        rows.append(figures)
        print(
            f"  filled at {figures['insert_rate']:,.0f} rows/s; {figures['minutes']:,} minutes "
            f"rolled up in {figures['roll_up_s']:.1f} s ({figures['rollup_rows']:,} rows; the "
            f"week's chart counts {figures['week_jobs']:,} jobs)",
            flush=True,
        )
    reset()
    print()
    print("| jobs | " + " | ".join(f"{n} (ms)" for n in names) + " |")
    print("| ---: |" + " ---: |" * len(names))
    for figures in rows:
        cells = " | ".join(f"{figures[n][0]:.1f} (cpu {figures[n][1]:.1f})" for n in names)
        print(f"| {figures['jobs']:,} | {cells} |")
    print()
    print(
        f"Medians of {args.runs} runs, wall clock (this process's CPU time); {os.cpu_count()} "
        f"CPUs shared with the database; load average {os.getloadavg()[0]:.2f}."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
