"""Memory that stays flat: the enqueuing process's and a worker's RSS as the jobs add up.

Usage, from the repository root, with a local PostgreSQL::

    python -m bench.memory                    # 100,000 jobs
    python -m bench.memory --jobs 20000

- **enqueue_many**: ``--jobs`` no-op jobs in batches of 1,000 from this process; its resident
  set size (RSS) after the first tenth and after all of them. Goal: flat (the second within
  10% of the first): nothing per job is kept once its batch is in.
- **worker**: one idle ``runjobs --concurrency 4`` drains a tenth of the jobs, then the rest;
  its RSS after each. Goal: the second within 10% of the first.

RSS is read from ``/proc/PID/status`` (``VmRSS``). Like every figure here it is measured, not
asserted: CI times nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import DEFAULT_URL, Worker, prepare_database, reset, sql  # noqa: E402

BATCH = 1_000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def succeeded() -> int:
    return sql("SELECT COUNT(*) FROM django_jobs_job WHERE state = 'succeeded'")[0][0]


def enqueue(noop: object, start: int, stop: int, tag: str) -> None:
    for first in range(start, stop, BATCH):
        last = min(first + BATCH, stop)
        noop.enqueue_many([{"n": n, "run": tag} for n in range(first, last)])  # type: ignore[attr-defined]


def wait_drained(expected: int, worker: Worker, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while succeeded() < expected:
        if worker.popen.poll() is not None:
            raise SystemExit("runjobs exited:\n" + "".join(worker.output))
        if time.monotonic() > deadline:
            raise SystemExit(f"only {succeeded()} of {expected} jobs succeeded in {timeout} s")
        time.sleep(0.2)


def measure(jobs: int) -> dict[str, float]:
    """RSS (MiB) of this process and of a worker after a tenth of ``jobs`` and after all."""
    from bench.jobs import noop

    tenth = max(jobs // 10, BATCH)
    tag = time.strftime("%H%M%S")

    reset()
    enqueue(noop, 0, tenth, tag)
    gc.collect()
    producer_first = rss_mib(os.getpid())
    enqueue(noop, tenth, jobs, tag)
    gc.collect()
    producer_last = rss_mib(os.getpid())

    reset()
    worker = Worker("--concurrency", "4")
    worker.wait_ready()
    try:
        enqueue(noop, 0, tenth, tag)
        wait_drained(tenth, worker)
        worker_first = rss_mib(worker.popen.pid)
        enqueue(noop, tenth, jobs, tag)
        wait_drained(jobs, worker)
        worker_last = rss_mib(worker.popen.pid)
    finally:
        worker.stop()
    reset()
    return {
        "producer_first": producer_first,
        "producer_last": producer_last,
        "worker_first": worker_first,
        "worker_last": worker_last,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args(argv)
    os.environ.setdefault("BENCH_LIVE_EVENTS", "1")
    prepare_database(args.database_url)
    rss = measure(args.jobs)
    tenth = max(args.jobs // 10, BATCH)

    print(f"| process | RSS after {tenth:,} | RSS after {args.jobs:,} | ratio | goal |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, first, last in (
        (f"enqueue_many, batches of {BATCH:,}", rss["producer_first"], rss["producer_last"]),
        ("runjobs --concurrency 4", rss["worker_first"], rss["worker_last"]),
    ):
        print(f"| {name} | {first:,.1f} MiB | {last:,.1f} MiB | {last / first:.3f} | ≤ 1.10 |")
    print(
        f"\nlive events on; {os.cpu_count()} CPUs; load average (1 min) at the end "
        f"{os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
