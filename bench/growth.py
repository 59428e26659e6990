"""Claims as the job table grows: drain and pickup beside 0, 1,000,000 ... ended rows; pruning.

Usage, from the repository root, with a local PostgreSQL::

    python -m bench.growth                          # 0 and 1,000,000 ended rows
    python -m bench.growth --ended 0,1000000,10000000 --jobs 20000

For each count the job table is emptied and filled with that many ended rows (state
``succeeded``, ``ended_at`` set, spread over the hour before a day ago) in one
``INSERT ... SELECT ... generate_series`` that copies a real job's row, so every column the
model has gets a value the model wrote. Then, beside them:

- ``drain``: ``--jobs`` no-op jobs enqueued in batches of 1,000 and drained by one
  ``runjobs --burst --concurrency 4``; rate = jobs / (last ``ended_at`` - ready line);
- ``pickup``: an idle worker while ``--pickup-jobs`` jobs are enqueued 10 ms apart; latency =
  from the clock reading before ``enqueue`` to the runner's first line (``bench.harness.pickup``;
  p50, p95, p99);
- ``claim index``: the size of the partial claim index, which holds only queued and waiting
  rows, whatever the ended rows number; beside it the table's with all its indexes;
- ``prune``: ``maintenance.prune("1h")`` (what ``manage.py jobs prune --older-than 1h`` runs)
  deletes the ended rows in its batches of 2,000; rate = rows deleted / its wall time.

Each figure is printed with the load average (1 minute): the machine's cores are shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402 - needs the root on sys.path first
    DEFAULT_URL,
    drain,
    enqueue_in_batches,
    pickup,
    prepare_database,
    reset,
    sql,
)

FILLER_KIND = "bench.ended"
TABLE = "django_jobs_job"


def fill_ended(count: int) -> float:
    """Insert ``count`` ended rows; return the rows inserted per second.

    The rows copy one template job made by the engine, so columns added to the model later get
    the values the engine gives them; only what tells the rows apart is replaced.
    """
    from bench.jobs import noop

    if count == 0:
        return 0.0
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
    replaced = {
        "kind": "%(kind)s",
        "state": "'succeeded'",
        "attempts": "1",
        "payload": "jsonb_build_object('n', g)",
        "result": "NULL",
        "idempotency_key": "'ended:' || g",
        "worker_id": "NULL",
        "leased_until": "NULL",
        # A day old, spread over an hour, so a one-hour retention finds every row.
        "run_at": "now() - interval '25 hours' + g * interval '1 microsecond'",
        "created_at": "now() - interval '25 hours' + g * interval '1 microsecond'",
        "started_at": "now() - interval '25 hours' + g * interval '1 microsecond'",
        "ended_at": "now() - interval '25 hours' + g * interval '1 microsecond'",
    }
    select = ", ".join(replaced.get(name, f"t.{name}") for name in columns)
    began = time.perf_counter()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} ({', '.join(columns)}) SELECT {select} "
            f"FROM {TABLE} AS t, generate_series(1, %(count)s) AS g WHERE t.id = %(id)s",
            {"kind": FILLER_KIND, "count": count, "id": template.pk},
        )
        cursor.execute(f"DELETE FROM {TABLE} WHERE id = %s", [template.pk])
    rate = count / (time.perf_counter() - began)
    # As autovacuum would soon: fresh statistics and a visibility map, so the plans are the
    # ones a table of that size gets in production.
    sql_autocommit(f"VACUUM ANALYZE {TABLE}")
    return rate


def sql_autocommit(statement: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement)


def claim_index_bytes() -> int:
    return sql("SELECT pg_relation_size('django_jobs_claim_idx')")[0][0]


def table_bytes() -> int:
    """The job table with all its indexes: the ones that are not partial grow with it."""
    return sql(f"SELECT pg_total_relation_size('{TABLE}')")[0][0]


def prune_all() -> tuple[int, float]:
    """Prune every filler row as ``jobs prune --older-than 1h`` does: (rows, rows/s)."""
    from django_jobs.engine.maintenance import prune

    began = time.perf_counter()
    result = prune("1h")
    seconds = time.perf_counter() - began
    (left,) = sql(f"SELECT COUNT(*) FROM {TABLE} WHERE kind = %s", [FILLER_KIND])[0]
    if left:
        raise SystemExit(f"prune left {left} ended rows")
    return result.jobs, result.jobs / max(seconds, 1e-9)


def measure(ended: int, jobs: int, pickup_jobs: int, *, prune: bool) -> dict[str, Any]:
    reset()
    figures: dict[str, Any] = {"ended": ended, "insert_rate": fill_ended(ended)}
    enqueue_in_batches(jobs, 1_000, f"growth-{ended}")
    figures["drain"], _ = drain(4, jobs)
    figures["drain_load"] = os.getloadavg()[0]
    reset_noops()
    figures["pickup"] = pickup(pickup_jobs, 0.01, 4, f"growth-pickup-{ended}")
    figures["pickup_load"] = os.getloadavg()[0]
    figures["claim_index_kb"] = claim_index_bytes() / 1024
    figures["table_mb"] = table_bytes() / 1024 / 1024
    if ended and prune:
        figures["pruned"], figures["prune_rate"] = prune_all()
        figures["prune_load"] = os.getloadavg()[0]
    return figures


def reset_noops() -> None:
    """Delete the drained no-op jobs, keeping the ended rows: the pickup counts its own."""
    from bench.jobs import KIND

    sql_autocommit(f"DELETE FROM {TABLE} WHERE kind = '{KIND}'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.growth", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--ended", default="0,1000000", help="comma-separated ended-row counts")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs drained at each count")
    parser.add_argument("--pickup-jobs", type=int, default=500)
    parser.add_argument("--no-prune", action="store_true", help="skip the prune figure")
    args = parser.parse_args(argv)
    counts = [int(part) for part in args.ended.split(",") if part.strip()]
    os.environ.setdefault("BENCH_LIVE_EVENTS", "1")
    prepare_database(args.database_url)
    rows = []
    for ended in counts:
        print(f"{ended:,} ended rows", flush=True)
        figures = measure(ended, args.jobs, args.pickup_jobs, prune=not args.no_prune)
        rows.append(figures)
        p50, p95, p99 = figures["pickup"]
        print(
            f"  filled at {figures['insert_rate']:,.0f} rows/s; drain {figures['drain']:,.0f} "
            f"jobs/s (load {figures['drain_load']:.2f}); pickup p50 {p50:.1f} p95 {p95:.1f} "
            f"p99 {p99:.1f} ms (load {figures['pickup_load']:.2f}); claim index "
            f"{figures['claim_index_kb']:,.0f} KiB; table and indexes "
            f"{figures['table_mb']:,.0f} MiB",
            flush=True,
        )
        if "pruned" in figures:
            print(
                f"  pruned {figures['pruned']:,} at {figures['prune_rate']:,.0f} rows/s "
                f"(load {figures['prune_load']:.2f})",
                flush=True,
            )
    reset()
    print()
    print(
        "| ended rows | drain c=4 (jobs/s) | load | pickup p50 / p95 / p99 (ms) | load "
        "| claim index (KiB) | table and indexes (MiB) | prune (rows/s) | load |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for figures in rows:
        p50, p95, p99 = figures["pickup"]
        prune_cells = (
            f"{figures['prune_rate']:,.0f} | {figures['prune_load']:.2f}"
            if "pruned" in figures
            else "- | -"
        )
        print(
            f"| {figures['ended']:,} | {figures['drain']:,.0f} | {figures['drain_load']:.2f} "
            f"| {p50:.1f} / {p95:.1f} / {p99:.1f} | {figures['pickup_load']:.2f} "
            f"| {figures['claim_index_kb']:,.0f} | {figures['table_mb']:,.0f} | {prune_cells} |"
        )
    print()
    print(
        f"{args.jobs:,} no-op jobs drained and {args.pickup_jobs} paced 10 ms apart at each "
        f"count, live events on; {os.cpu_count()} CPUs shared by the worker and the database"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
