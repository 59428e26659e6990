"""What the peers' loops share. These scripts run in the peers' environment
(``bench/peers_env.py``): they import psycopg and the peers, never django_jobs.

Every loop prints one JSON object on its last line: figure name -> value.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from typing import Any

JOB_TABLE = "django_jobs_job"


def connect(url: str, **options: Any) -> Any:
    """A psycopg connection as a user opens one: autocommit, psycopg's defaults otherwise."""
    import psycopg

    return psycopg.connect(url, autocommit=True, **options)


def reset_job_table(url: str) -> None:
    """Empty django_jobs' job table, as the engine's figures start (bench.harness.reset)."""
    with connect(url) as conn:
        conn.execute(f"TRUNCATE {JOB_TABLE} RESTART IDENTITY CASCADE")
        conn.execute(f"VACUUM ANALYZE {JOB_TABLE}")


def rate(n: int, fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"Timed out waiting for {what}.")
        time.sleep(0.02)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("figure")
    p.add_argument("--url", required=True)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--pickup-jobs", type=int, default=200)
    p.add_argument("--pickup-gap", type=float, default=20, help="ms")
    return p


def emit(figures: dict[str, float]) -> None:
    print(json.dumps(figures), flush=True)
