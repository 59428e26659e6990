"""The claim planned, prepared or kept, on an empty and a big table: `python -m bench.claim_plans`.

The engine plans its claim on every execution (``Store.planned_cursor``): a plan kept from an
empty table read the whole queue once it filled (docs/scaling.md, "A claim planned on an empty
table"). This measures what keeping the statement would save, and what it risks, with the
claim's own text and parameters (``Store.claim_statement``, 8 jobs at most) sent on an
autocommit psycopg connection of its own. For each count of ``--ended`` rows (state
``succeeded``, as ``bench.growth`` fills them; default 0 and 1,000,000), three ways:

- ``planned``: as the engine sends it: server-side binding, never prepared, so parsed and
  planned on every execution;
- ``custom``: prepared, with ``plan_cache_mode = force_custom_plan`` on the connection:
  parsed once, planned on every execution for the parameters it gets;
- ``generic``: prepared, with ``plan_cache_mode = force_generic_plan``: parsed and planned
  once, the plan kept for the connection's life (or until the table's statistics change).

**Latency**: one no-op job enqueued, ``--gap`` ms, then the claim timed from its send to its
rows back; p50 and p90 of ``--claims`` claims (after 10 not counted), each way in turn,
``--runs`` times, the ratio to ``planned`` within each run.

**The kept plan**: the generic plan made on the table as it is (its queue empty, vacuumed and
analyzed), then ``--queued`` jobs enqueued with no ``ANALYZE`` in between (autovacuum may be
slower than a burst), and five claims timed on the plan kept from before, each beside a
planned claim; the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.growth import (  # noqa: E402 - needs the root on sys.path first
    TABLE,
    fill_ended,
    reset_noops,
    sql_autocommit,
)
from bench.harness import (  # noqa: E402
    DEFAULT_URL,
    enqueue_in_batches,
    percentile,
    prepare_database,
    reset,
)

#: Each way's session setting and whether psycopg prepares the statement.
WAYS: dict[str, tuple[str | None, bool]] = {
    "planned": (None, False),
    "custom": ("force_custom_plan", True),
    "generic": ("force_generic_plan", True),
}
LIMIT = 8
WARM_UP = 10


def claim_statement() -> tuple[str, list[Any]]:
    """The engine's claim, now, for up to ``LIMIT`` jobs of the default engine."""
    from django_jobs import clock
    from django_jobs.store import Claim, get_store

    now = clock.now()
    request = Claim(
        engine="default",
        worker_id="claim-plans",
        limit=LIMIT,
        now=now,
        leased_until=now + timedelta(seconds=30),
    )
    return get_store().claim_statement(request)


def connect(url: str, way: str) -> Any:
    import psycopg

    setting, _ = WAYS[way]
    conn = psycopg.connect(url, autocommit=True)
    if setting is not None:
        conn.execute(f"SET plan_cache_mode = {setting}")
    return conn


def timed_claim(conn: Any, way: str) -> tuple[float, int]:
    """One claim: milliseconds from its send to its rows back, and how many it took."""
    sql, params = claim_statement()
    began = time.perf_counter()
    rows = conn.execute(sql, params, prepare=WAYS[way][1]).fetchall()
    return (time.perf_counter() - began) * 1000, len(rows)


def latencies(url: str, way: str, claims: int, gap: float, tag: str) -> list[float]:
    """``claims`` paced claims of one job each (after ``WARM_UP`` not counted), in ms."""
    from bench.jobs import noop

    found = []
    with connect(url, way) as conn:
        for n in range(WARM_UP + claims):
            noop.enqueue({"n": n, "run": tag})
            time.sleep(gap)
            ms, taken = timed_claim(conn, way)
            if taken != 1:
                raise SystemExit(f"A claim ({way}) took {taken} jobs, not the one enqueued.")
            if n >= WARM_UP:
                found.append(ms)
    reset_noops()
    return found


def kept_plan(url: str, queued: int, tag: str) -> dict[str, float]:
    """Claims on the generic plan made before ``queued`` jobs arrived, and planned ones."""
    with connect(url, "generic") as kept, connect(url, "planned") as fresh:
        timed_claim(kept, "generic")  # the plan is made now, on the table as it is
        enqueue_in_batches(queued, 1_000, tag)
        pairs = [
            (timed_claim(kept, "generic")[0], timed_claim(fresh, "planned")[0]) for _ in range(5)
        ]
        figures = {
            "generic, kept": statistics.median(k for k, _ in pairs),
            "planned": statistics.median(p for _, p in pairs),
        }
    reset_noops()
    return figures


def measure(
    ended: int, *, claims: int, gap: float, runs: int, queued: int, log: Callable[[str], None]
) -> dict[str, Any]:
    reset()
    fill_ended(ended)  # then VACUUM ANALYZE: the table as a quiet queue leaves it
    # First, while no job has been queued since: a plan made on a table with dead rows of
    # claimed jobs reckons with their pages, and is not the one an idle queue gets.
    kept = kept_plan(os.environ["DATABASE_URL"], queued, f"{ended}-kept")
    sql_autocommit(f"VACUUM ANALYZE {TABLE}")
    by_way: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    for run in range(runs):
        for way in WAYS:
            found = latencies(os.environ["DATABASE_URL"], way, claims, gap, f"{ended}-{run}-{way}")
            by_way[way].append((statistics.median(found), percentile(found, 90)))
        log(
            f"  run {run + 1}: "
            + ", ".join(f"{way} {by_way[way][-1][0]:.3f}" for way in WAYS)
            + " ms (p50)"
        )
    return {"by_way": by_way, "kept": kept}


def report(ended: int, figures: dict[str, Any], queued: int) -> list[str]:
    by_way = figures["by_way"]
    lines = []
    for way, runs in by_way.items():
        ratios = [
            p50 / planned[0] for (p50, _), planned in zip(runs, by_way["planned"], strict=True)
        ]
        lines.append(
            f"| {ended:,} | {way} | {statistics.median(p for p, _ in runs):.3f} | "
            f"{statistics.median(p for _, p in runs):.3f} | {statistics.median(ratios):.2f} |"
        )
    kept = figures["kept"]
    lines.append(
        f"| {ended:,} | generic plan kept, then {queued:,} jobs queued | "
        f"{kept['generic, kept']:.3f} | - | {kept['generic, kept'] / kept['planned']:.2f} |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.claim_plans", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--ended", default="0,1000000", help="comma-separated ended-row counts")
    parser.add_argument("--claims", type=int, default=150, help="paced claims per way and run")
    parser.add_argument("--gap", type=float, default=20, help="ms between a job and its claim")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queued", type=int, default=50_000, help="jobs after the kept plan")
    args = parser.parse_args(argv)
    os.environ.setdefault("BENCH_LIVE_EVENTS", "1")
    prepare_database(args.database_url)
    table = [
        "| ended rows | way | claim p50 (ms) | p90 (ms) | p50 / planned |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for ended in (int(part) for part in args.ended.split(",") if part.strip()):
        print(f"{ended:,} ended rows", flush=True)
        figures = measure(
            ended,
            claims=args.claims,
            gap=args.gap / 1000,
            runs=args.runs,
            queued=args.queued,
            log=lambda line: print(line, flush=True),
        )
        table += report(ended, figures, args.queued)
    reset()
    print()
    print("\n".join(table))
    print(f"\nload average (1 min) {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
