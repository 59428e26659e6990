"""What tracing costs: enqueue and drain with tracing off, with the API and no SDK, and with
the SDK exporting to nowhere, side by side in one run (``python -m bench`` runs it too).

Usage, from the repository root, with a local PostgreSQL::

    python -m bench.tracing                    # 5,000 jobs, 3 repetitions of each mode
    python -m bench.tracing --jobs 2000 --runs 5

Each repetition runs each mode in a fresh process (``BENCH_TRACING``, read by ``bench.apps``):
``off`` (as if ``opentelemetry-api`` were not installed), ``api`` (installed, no SDK: the
default of a project with the ``otel`` extra), ``sdk`` (a ``TracerProvider`` with a
``BatchSpanProcessor`` over an exporter that drops the spans), ``sampled`` (the same, keeping
one trace in ten: ``ParentBased(TraceIdRatioBased(0.1))``), ``floor`` (the SDK as in ``sdk``,
each enqueue's and attempt's span bare: a name, no attribute, no link, no stored context; what
one span costs here whatever is put on it). The enqueue is ``--jobs`` single ``enqueue``
calls in autocommit; the drain is a ``manage.py runjobs --concurrency 4`` (the worker's
default processes, live events on) over four times as many jobs (those, and the rest enqueued
in batches), all due a moment after it is ready: ``jobs / (last ended_at - due)``. The
report (``bench/report.py``) gives each mode beside ``off``, with the goals (api within 2 %,
sdk within 15 %), and the worker's CPU time per job (its processes', read from ``/proc``
between the due moment and the last end), which the machine's other load disturbs less. Each
repetition starts with the next mode.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.harness import (  # noqa: E402
    DEFAULT_URL,
    Worker,
    engine_pythonpath,
    prepare_database,
    reset,
    sql,
)

MODES = ("off", "api", "sdk", "sampled", "floor")
#: The drain runs this many times the jobs enqueued one by one: those, and the rest enqueued
#: in batches of 1,000 (a ``send`` span per batch, whose context each of its jobs stores).
DRAIN_FACTOR = 4


def side(jobs: int, tag: str) -> dict[str, float]:
    """One mode's figures, in this process (its BENCH_TRACING is the mode)."""
    from datetime import UTC, datetime

    from bench.jobs import noop

    reset()
    began = time.perf_counter()
    for n in range(jobs):
        noop.enqueue({"n": n, "run": tag})
    enqueue_rate = jobs / (time.perf_counter() - began)
    # The drain takes DRAIN_FACTOR times as many: a drain of a second or less moves with the
    # worker's start and a poll more than with what tracing adds.
    more = [{"n": n, "run": tag} for n in range(jobs, jobs * DRAIN_FACTOR)]
    for start in range(0, len(more), 1_000):
        noop.enqueue_many(more[start : start + 1_000])
    jobs *= DRAIN_FACTOR
    due_at(datetime.fromtimestamp(time.time() + 3600, UTC))  # not before the worker is up
    os.environ["JOBS_POLL_INTERVAL"] = "0.02s"
    worker = Worker("--concurrency", "4")
    try:
        worker.wait_ready()
        deadline = time.monotonic() + 60
        while not any(line.startswith("runjobs: worker ") for line in list(worker.output)):
            if time.monotonic() > deadline:
                raise SystemExit("".join(worker.output))
            time.sleep(0.05)
        due = time.time() + 1.0
        due_at(datetime.fromtimestamp(due, UTC))
        pids = worker_pids(worker.popen.pid)
        cpu_before = cpu_seconds(pids)
        while sql(
            "SELECT EXISTS (SELECT 1 FROM django_jobs_job WHERE state IN ('queued', 'running'))"
        )[0][0]:
            time.sleep(0.05)
        cpu = cpu_seconds(pids) - cpu_before
    finally:
        worker.stop()
    counts = dict(sql("SELECT state, COUNT(*) FROM django_jobs_job GROUP BY state"))
    if counts != {"succeeded": jobs}:
        raise SystemExit(f"tracing {os.environ.get('BENCH_TRACING')}: states {counts}")
    (last_end,) = sql("SELECT MAX(ended_at) FROM django_jobs_job")[0]
    return {
        "enqueue": enqueue_rate,
        "drain": jobs / (last_end.timestamp() - due),
        "drain cpu": cpu / jobs * 1e6,
    }


def worker_pids(supervisor: int) -> list[int]:
    """The supervisor, its template and its worker processes (Linux): the processes under it,
    two levels down (the template forks the worker processes)."""
    found = [supervisor]
    for pid in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split():
        found.append(int(pid))
        found += map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes used so far (``/proc/<pid>/stat``)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def due_at(moment: object) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE django_jobs_job SET run_at = %s", [moment])


def measure(jobs: int, tag: str, database_url: str, turn: int = 0) -> dict[str, float]:
    """One repetition of every mode, each in a process of its own, starting with mode number
    ``turn`` (the repetition's: no mode always runs first or last); figures by name
    (``report.tracing_figure``)."""
    figures = {}
    turn %= len(MODES)
    # -P and the worker's path: under ``--against`` the engine is the revision's.
    for mode in MODES[turn:] + MODES[:turn]:
        done = subprocess.run(
            [
                *(sys.executable, "-P", "-m", "bench.tracing", "--side", "--jobs", str(jobs)),
                *("--tag", f"{tag}-{mode}", "--database-url", database_url),
            ],
            cwd=ROOT,
            env={
                **os.environ,
                "BENCH_TRACING": mode,
                "PYTHONPATH": engine_pythonpath(),
            },
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"bench.tracing, mode {mode}:\n{done.stdout}{done.stderr}")
        side_figures = json.loads(done.stdout.strip().splitlines()[-1])
        for name, value in side_figures.items():
            figures[report.tracing_figure(name, mode)] = value
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="tracing", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    prepare_database(args.database_url)
    if args.side:
        print(json.dumps(side(args.jobs, args.tag)))
        return 0
    rows: dict[str, list[float]] = {}
    for run in range(args.runs):
        figures = measure(args.jobs, f"{time.time():.0f}-{run}", args.database_url, run)
        for name, value in figures.items():
            rows.setdefault(name, []).append(value)
    print(f"\n{args.jobs:,} jobs, {args.runs} run(s), {os.cpu_count()} CPUs")
    # The same tables and goals as ``python -m bench``'s (bench/report.py): ratios within
    # each repetition, then their median; a cpu row's ratio above 1 costs more than off.
    print(report.figures_table(rows))
    print()
    print(report.side_by_side(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
