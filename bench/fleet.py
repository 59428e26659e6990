"""The fleet: 1, 2, 4 and 8 ``runjobs`` processes draining one queue, with the database's CPU.

Usage, from the repository root, with a local PostgreSQL::

    python -m bench.fleet                        # 50,000 jobs per fleet size, sizes 1 2 4 8
    python -m bench.fleet --jobs 10000 --sizes 1,2 --concurrency 4
    python -m bench.fleet --netns --sizes 1,2,4    # each size direct, then in namespaces (root)

For each fleet size the job table is emptied and that many ``manage.py runjobs --no-scheduler
--concurrency C`` processes start and wait, idle (polling every 20 ms). Once every one is
ready, ``--jobs`` no-op jobs are enqueued (in batches of 1,000), all due at one moment a
little later (``--lead`` seconds after the enqueue began), and the table is analyzed. So the
whole fleet is up before the first job is due, and a worker that started sooner does not
drain alone while the others start (with 8 processes on 2 cores, their starts spread over
seconds). The rate is
``jobs / (last ended_at - the due moment)``. The CPU of the workers and of the PostgreSQL
server's processes for the benchmark's database (its backends and the server's shared
writers, read from ``/proc``; see ``postgres_pids``) is counted from the due moment to the
last job's end; the database's is given in cores (1.0 is one core busy) and per job, the
workers' per job. The load average (1 minute) is printed with each size. Every job must end
``succeeded`` exactly once (``attempts == 1``).

With ``--netns`` each size runs twice: as above, then with worker ``i`` in network namespace
``i`` (``bench/netns.py``), reaching PostgreSQL over a veth and the forwarder process in the
root namespace, whose CPU is counted apart ("forwarder CPU per job").

Each worker stands for a host's worker process; on this machine they share its cores with
the database, so the figures show the engine's contention (claims, outcome batches) more
than a real fleet's capacity. docs/scaling.md has the figures and what they mean.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402 - needs the root on sys.path first
    DEFAULT_URL,
    Worker,
    cpu_seconds,
    prepare_database,
    reset,
    sql,
)
from bench.netns import Hosts, available  # noqa: E402 - needs the root on sys.path first


def postgres_pids(database: str) -> list[int]:
    """The server's processes that work for ``database``: its backends, by their process
    title (``postgres: ... USER DATABASE HOST(PORT) STATE``), and the server's own shared
    ones (WAL writer, checkpointer, background writer: other databases' writes wake them too).
    Other databases' backends (other users of the same server) are left out."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in ("postgres", "postmaster"):
                continue
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile
            continue
        backend = "(" in title or "[local]" in title
        if not backend or f" {database} " in title:
            pids.append(int(entry.name))
    return pids


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each of these processes still alive."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / ticks
    return found


class DatabaseCPU:
    """The CPU time the server's processes use from ``start()`` to ``stop()``.

    A backend takes its CPU time with it when it exits (a burst worker's connections close as
    it ends), so the processes are sampled every 50 ms and each one's last reading counts: a
    backend's last 50 ms at most are missed. Backends that start meanwhile count from zero.
    """

    def __init__(self, database: str) -> None:
        self.database = database
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self.first = cpu_by_pid(postgres_pids(self.database))
        self.last = dict(self.first)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopped.wait(0.05):
            self.last.update(cpu_by_pid(postgres_pids(self.database)))

    def stop(self) -> float:
        self.stopped.set()
        self.thread.join()
        self.last.update(cpu_by_pid(postgres_pids(self.database)))
        return sum(value - self.first.get(pid, 0.0) for pid, value in self.last.items())


def enqueue_due_at(jobs: int, lead: float, tag: str) -> float:
    """Enqueue ``jobs`` no-ops, all due ``lead`` seconds from now; return that moment."""
    from datetime import UTC, datetime

    from bench.jobs import noop

    due = time.time() + lead
    run_at = datetime.fromtimestamp(due, tz=UTC)
    payloads = [{"n": i, "run": tag} for i in range(jobs)]
    for start in range(0, jobs, 1_000):
        noop.enqueue_many(payloads[start : start + 1_000], run_at=run_at)
    # The idle workers prepared their claim on an empty table, whose cheapest plan is a
    # sequential scan, and PostgreSQL keeps that plan until the table is analyzed: every
    # claim then reads the whole queue (docs/scaling.md, "A claim planned on an empty table").
    # Autovacuum analyzes it within about a minute; the figures are of the queue after that.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job")
    if time.time() >= due:
        raise SystemExit(f"Enqueuing {jobs:,} jobs took longer than --lead {lead}s: raise it.")
    return due


def drain_with(
    size: int,
    concurrency: int,
    jobs: int,
    database_name: str,
    lead: float,
    hosts: Hosts | None = None,
) -> dict[str, float]:
    """Drain with ``size`` workers; with ``hosts``, worker ``i`` runs in namespace ``i``."""
    reset()
    # Idle workers poll often, so each claims the moment the jobs are due (the NOTIFY of
    # their enqueue came earlier, when nothing was due yet).
    os.environ["JOBS_POLL_INTERVAL"] = "0.02s"
    if hosts is None:
        workers = [Worker("--concurrency", str(concurrency)) for _ in range(size)]
    else:
        url = os.environ["DATABASE_URL"]
        workers = [
            Worker(
                "--concurrency",
                str(concurrency),
                prefix=hosts.prefix(i),
                env={"DATABASE_URL": hosts.database_url(i, url)},
            )
            for i in range(size)
        ]
    forwarder_pid = hosts.forwarder.pid if hosts is not None and hosts.forwarder else None
    try:
        for worker in workers:
            worker.wait_ready()
        due = enqueue_due_at(jobs, lead, f"fleet-{size}")
        database = DatabaseCPU(database_name)
        time.sleep(max(due - time.time(), 0))
        database.start()
        worker_start = sum(cpu_seconds(worker.popen.pid) for worker in workers)
        forwarder_start = cpu_seconds(forwarder_pid) if forwarder_pid else 0.0

        # A cheap question on an index, asked every 100 ms: this connection's backend is one
        # of the database's processes whose CPU is counted.
        while sql(
            "SELECT EXISTS (SELECT 1 FROM django_jobs_job WHERE state IN ('queued', 'running'))"
        )[0][0]:
            time.sleep(0.1)
        worker_cpu = sum(cpu_seconds(worker.popen.pid) for worker in workers) - worker_start
        forwarder_cpu = cpu_seconds(forwarder_pid) - forwarder_start if forwarder_pid else 0.0
        database_seconds = database.stop()
        measured = time.time()
    finally:
        for worker in workers:
            worker.stop()
    counts = dict(sql("SELECT state, COUNT(*) FROM django_jobs_job GROUP BY state"))
    (repeated,) = sql("SELECT COUNT(*) FROM django_jobs_job WHERE attempts <> 1")[0]
    if counts != {"succeeded": jobs} or repeated:
        raise SystemExit(f"fleet of {size}: states {counts}, {repeated} job(s) not run once")
    first_start, last_end = sql("SELECT MIN(started_at), MAX(ended_at) FROM django_jobs_job")[0]
    wall = last_end.timestamp() - due
    return {
        "rate": jobs / wall,
        # Counted up to when the drain was seen done: at most 100 ms after the last end.
        "db_cores": database_seconds / max(measured - due, 1e-9),
        "worker_cpu_us": worker_cpu / jobs * 1e6,
        # Per job, the database's CPU is less disturbed by the other processes on the machine
        # than its share of the wall clock.
        "db_cpu_us": database_seconds / jobs * 1e6,
        "forwarder_cpu_us": forwarder_cpu / jobs * 1e6,
        "first_start_ms": (first_start.timestamp() - due) * 1000,
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--sizes", default="1,2,4,8", help="comma-separated fleet sizes")
    parser.add_argument("--concurrency", type=int, default=4, help="per worker process")
    parser.add_argument(
        "--lead", type=float, default=10.0, help="seconds from the enqueue to the jobs' due time"
    )
    parser.add_argument(
        "--netns",
        action="store_true",
        help="also run each fleet with every worker in a network namespace of its own "
        "(bench/netns.py: a veth and a forwarder to 127.0.0.1; needs root and ip)",
    )
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.sizes.split(",") if part.strip()]
    os.environ.setdefault("BENCH_LIVE_EVENTS", "1")
    prepare_database(args.database_url)
    database_name = unquote(urlparse(args.database_url).path.lstrip("/"))
    with contextlib.ExitStack() as stack:
        hosts = None
        if args.netns:
            why = available()
            if why is not None:
                raise SystemExit(f"--netns: {why}")
            hosts = stack.enter_context(Hosts(max(sizes)))
        paths = ["direct", "netns"] if hosts is not None else ["direct"]
        rows = []
        for size in sizes:
            for path in paths:
                print(
                    f"fleet of {size} x concurrency {args.concurrency} ({path}): "
                    f"{args.jobs:,} jobs",
                    flush=True,
                )
                figures = drain_with(
                    size,
                    args.concurrency,
                    args.jobs,
                    database_name,
                    args.lead,
                    hosts if path == "netns" else None,
                )
                rows.append((size, path, figures))
                print(
                    f"  {figures['rate']:,.0f} jobs/s, database {figures['db_cores']:.2f} cores, "
                    f"workers {figures['worker_cpu_us']:,.0f} us CPU per job, "
                    f"database {figures['db_cpu_us']:,.0f} us CPU per job, forwarder "
                    f"{figures['forwarder_cpu_us']:,.0f} us CPU per job, first start "
                    f"{figures['first_start_ms']:,.0f} ms after due, load {figures['load']:.2f}",
                    flush=True,
                )
    reset()
    base = rows[0][2]["rate"] if rows else 0
    print()
    print(
        "| workers | path | jobs/s | vs 1 | database CPU (cores) | database CPU per job (us) "
        "| worker CPU per job (us) | forwarder CPU per job (us) | load (1 min) |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, path, figures in rows:
        print(
            f"| {size} | {path} | {figures['rate']:,.0f} | {figures['rate'] / base:.2f} | "
            f"{figures['db_cores']:.2f} | {figures['db_cpu_us']:,.0f} | "
            f"{figures['worker_cpu_us']:,.0f} | {figures['forwarder_cpu_us']:,.0f} | "
            f"{figures['load']:.2f} |"
        )
    print()
    print(
        f"{args.jobs:,} no-op jobs per size, --concurrency {args.concurrency} per worker, "
        f"live events on; {os.cpu_count()} CPUs shared by the workers and the database; "
        f"load average (1 min) at the end {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
