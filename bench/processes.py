"""Worker processes: drains with ``runjobs --processes 0, 1, 2, auto``, and kill-to-requeue.

Usage, from the repository root, with a local PostgreSQL and Redis::

    python -m bench.processes                  # 4,000 CPU-bound and 20,000 no-op jobs
    python -m bench.processes --cpu-jobs 1000 --noop-jobs 5000 --runs 3
    python -m bench.processes --no-celery      # django_jobs alone

For each mode a ``manage.py runjobs --concurrency 1 --processes P`` starts and waits, idle,
until it is ready (its children too); then the jobs are enqueued, all due a moment later, and
the rate is ``jobs / (last ended_at - the due moment)``. The CPU-bound kind runs about 20 ms
of pure Python a job (``bench.burn``, calibrated here); the no-op kind nothing. ``--processes
0`` is the worker without a supervisor (jobs in its own threads), the baseline of the default
(``--processes 1``: one child). Kill-to-requeue: a ``--processes 2`` worker runs one
``bench.hold`` job; its child is killed with SIGKILL and the time until the job's row says
``WORKER_LOST`` is read by polling the row every 2 ms. Every job must succeed exactly once.

Starting children (``--starts`` alone): a child's start, from the SIGKILL of an idle child of a
``--processes 3`` worker to its replacement's ready line (the supervisor's "Worker process N
ready", seen by reading the output every 2 ms), two kills per slot, the median; beside it the
start the supervisor logs (from asking the template to the child's READY). Then the CPU-bound
drain with ``--processes 2 --max-jobs-per-child 3`` right after the same drain without
recycling (goal: at least 0.7 of it). Then kill -9 to running again: a ``bench.hold_first`` job
runs in one child of a ``--processes 2`` worker, 3,000 CPU-bound jobs are queued behind it, its
child is killed, and the time until the job's next attempt starts (its pid appended to a file
read every 2 ms) is taken, three times, the median: how soon a job lost with its process runs
again under a backlog (goal: under 1 s).

Beside them, right after ``--processes 2``: Celery's prefork pool at concurrency 2, with its
defaults and the Redis broker, on the same CPU-bound job (the same loop and loop count, the
same number of jobs), from the peers' environment (``bench/peerside/celery_burn.py``: how it
is timed to mirror the drains here). ``python -m bench --only processes`` leaves it out, as
its ``--against`` sides must (Celery does not change with the engine's revision).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.harness import DEFAULT_URL, Worker, prepare_database, reset, sql  # noqa: E402


def calibrate(target_s: float = 0.02) -> int:
    """Loops of ``bench.burn`` that take about ``target_s`` here."""
    from bench.jobs import burn

    class Ctx:
        payload = {"loops": 200_000}

    began = time.perf_counter()
    burn.func(Ctx())
    took = time.perf_counter() - began
    return max(int(200_000 * target_s / took), 1000)


def drain(processes: str, kind: str, jobs: int, loops: int, tag: str, *extra: str) -> float:
    from datetime import UTC, datetime

    from bench.jobs import burn, noop

    reset()
    os.environ["JOBS_POLL_INTERVAL"] = "0.02s"
    worker = Worker("--concurrency", "1", "--processes", processes, *extra)
    try:
        worker.wait_ready()
        _wait_for_children(worker, processes)
        due = time.time() + 2.0
        run_at = datetime.fromtimestamp(due, tz=UTC)
        handle = burn if kind == "cpu" else noop
        payloads = [{"n": i, "run": tag, "loops": loops} for i in range(jobs)]
        for start in range(0, jobs, 1_000):
            handle.enqueue_many(payloads[start : start + 1_000], run_at=run_at)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE django_jobs_job")
        while sql(
            "SELECT EXISTS (SELECT 1 FROM django_jobs_job WHERE state IN ('queued', 'running'))"
        )[0][0]:
            time.sleep(0.05)
    finally:
        worker.stop()
    counts = dict(sql("SELECT state, COUNT(*) FROM django_jobs_job GROUP BY state"))
    (repeated,) = sql("SELECT COUNT(*) FROM django_jobs_job WHERE attempts <> 1")[0]
    if counts != {"succeeded": jobs} or repeated:
        raise SystemExit(f"--processes {processes}: states {counts}, {repeated} not run once")
    (last_end,) = sql("SELECT MAX(ended_at) FROM django_jobs_job")[0]
    return jobs / (last_end.timestamp() - due)


def celery_drain(jobs: int, loops: int) -> float:
    """Celery's prefork pool, concurrency 2, on ``jobs`` CPU-bound tasks of ``loops`` loops."""
    from bench import peers, peers_env

    done = subprocess.run(
        [
            str(peers_env.ensure()),
            str(peers.SCRIPTS / "celery_burn.py"),
            "drain",
            *("--jobs", str(jobs), "--loops", str(loops), "--concurrency", "2"),
        ],
        cwd=peers.SCRIPTS,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"The Celery drain exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])["celery: prefork c=2 cpu-bound drain"]


def _wait_for_children(worker: Worker, processes: str) -> None:
    """Until each worker process printed its ready line (a supervisor's come after its own)."""
    count = os.cpu_count() or 1 if processes == "auto" else max(int(processes), 1)
    deadline = time.monotonic() + 60
    while sum(line.startswith("runjobs: worker ") for line in list(worker.output)) < count:
        if time.monotonic() > deadline or worker.popen.poll() is not None:
            raise SystemExit("".join(worker.output))
        time.sleep(0.05)


def kill_to_requeue(tag: str) -> float:
    """Seconds from a child's SIGKILL to its job's row saying WORKER_LOST."""
    import tempfile

    from bench.jobs import hold

    reset()
    os.environ["JOBS_POLL_INTERVAL"] = "0.02s"
    worker = Worker("--concurrency", "1", "--processes", "2")
    pidfile = Path(tempfile.mkdtemp()) / "pid"
    try:
        worker.wait_ready()
        _wait_for_children(worker, "2")
        job = hold.enqueue({"run": tag, "pidfile": str(pidfile)})
        began = time.monotonic()
        while not pidfile.exists() or not pidfile.read_text():
            if time.monotonic() - began > 60:
                raise SystemExit("the held job never started")
            time.sleep(0.01)
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        killed = time.monotonic()
        while not (
            sql("SELECT error FROM django_jobs_job WHERE id = %s", [job.pk])[0][0] or ""
        ).startswith("WORKER_LOST"):
            if time.monotonic() - killed > 30:
                raise SystemExit("the killed child's job was not ended within 30 s")
            time.sleep(0.002)
        return time.monotonic() - killed
    finally:
        worker.stop()


#: The supervisor's line as a child is ready: slot, pid, how it started and in how long.
SUPERVISOR_READY = re.compile(
    r"Worker process (\d+) ready \(pid (\d+)\), (forked|started) in (\d+) ms"
)


def _ready_children(worker: Worker) -> list[tuple[int, int, int]]:
    """(slot, pid, ms as the supervisor logged it) of each child that said it was ready."""
    return [
        (int(m[1]), int(m[2]), int(m[4]))
        for m in SUPERVISOR_READY.finditer("".join(list(worker.output)))
    ]


def child_starts(tag: str, processes: int = 3, per_slot: int = 2) -> tuple[float, float]:
    """Medians (ms) of a child's start: from the SIGKILL of an idle child to its replacement's
    ready line; and the start as the supervisor logs it. Two kills per slot at most: a third
    in a row just after a start would still be at once, a fourth backs off."""
    reset()
    worker = Worker("--concurrency", "1", "--processes", str(processes))
    seen: list[float] = []
    logged: list[float] = []
    try:
        worker.wait_ready()
        deadline = time.monotonic() + 120
        while len(_ready_children(worker)) < processes:
            if time.monotonic() > deadline or worker.popen.poll() is not None:
                raise SystemExit("".join(worker.output))
            time.sleep(0.05)
        for _ in range(per_slot):
            for slot in range(processes):
                before = _ready_children(worker)
                (pid,) = [p for s, p, _ in before if s == slot][-1:]
                time.sleep(0.3)  # the previous start's echoes settle
                os.kill(pid, signal.SIGKILL)
                killed = time.perf_counter()
                while len(now := _ready_children(worker)) == len(before):
                    if time.perf_counter() - killed > 60:
                        raise SystemExit("no child replaced the killed one within 60 s")
                    time.sleep(0.002)
                seen.append((time.perf_counter() - killed) * 1000)
                logged.append(now[-1][2])
    finally:
        worker.stop()
    print(f"{tag}: starts (ms) {[round(v) for v in seen]}, logged {logged}", file=sys.stderr)
    return statistics.median(seen), statistics.median(logged)


#: Seconds ``kill_to_running_again`` waits for the job's next attempt; longer counts as that.
AGAIN_WAIT = 300.0


def kill_to_running_again(tag: str, loops: int, backlog: int = 3000, samples: int = 3) -> float:
    """Median ms from the SIGKILL of a child running a job to that job's next attempt starting,
    with ``backlog`` CPU-bound jobs queued behind it."""
    import tempfile
    from datetime import UTC, datetime

    from bench.jobs import burn, hold_first

    values = []
    for sample in range(samples):
        reset()
        os.environ["JOBS_POLL_INTERVAL"] = "0.02s"
        worker = Worker("--concurrency", "1", "--processes", "2")
        pidfile = Path(tempfile.mkdtemp()) / "pids"
        try:
            worker.wait_ready()
            _wait_for_children(worker, "2")
            hold_first.enqueue({"run": f"{tag}-{sample}", "pidfile": str(pidfile)})
            began = time.monotonic()
            while not pidfile.exists() or not pidfile.read_text().strip():
                if time.monotonic() - began > 60:
                    raise SystemExit("the held job never started")
                time.sleep(0.01)
            now = datetime.now(tz=UTC)
            payloads = [{"n": i, "run": f"{tag}-{sample}", "loops": loops} for i in range(backlog)]
            for start in range(0, backlog, 1_000):
                burn.enqueue_many(payloads[start : start + 1_000], run_at=now)
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
            killed = time.perf_counter()
            while len(pidfile.read_text().split()) < 2:
                if time.perf_counter() - killed > AGAIN_WAIT:
                    # The backlog drained first or not, a figure: at least this long.
                    print(f"{tag}: not running again within {AGAIN_WAIT:g} s", file=sys.stderr)
                    break
                time.sleep(0.002)
            values.append((time.perf_counter() - killed) * 1000)
        finally:
            worker.stop()
    print(f"{tag}: kill -9 to running again (ms) {[round(v) for v in values]}", file=sys.stderr)
    return statistics.median(values)


def start_figures(
    tag: str, loops: int, jobs: int, plain: bool = True, again_samples: int = 3
) -> dict[str, float]:
    """A child's start, the recycling drain (with ``plain``, right after the same drain
    without), and kill -9 to the job running again under a backlog: one repetition of each."""
    figures: dict[str, float] = {}
    figures[report.CHILD_START], figures[report.CHILD_FORK] = child_starts(f"{tag}-starts")
    if plain:
        figures[f"{report.PROCESSES_CPU}2"] = drain("2", "cpu", jobs, loops, f"{tag}-plain")
    figures[report.RECYCLING_DRAIN] = drain(
        "2", "cpu", jobs, loops, f"{tag}-recycling", "--max-jobs-per-child", "3"
    )
    print(f"{tag}: {figures}", file=sys.stderr)  # before the longest figure
    figures[report.KILL_TO_RUNNING] = kill_to_running_again(
        f"{tag}-again", loops, samples=again_samples
    )
    return figures


CELERY = report.CELERY_PREFORK


def measure(
    cpu_jobs: int, noop_jobs: int, tag: str, loops: int | None = None, celery: bool = False
) -> dict[str, float]:
    """One repetition of every figure, by name (``python -m bench --only processes`` too);
    with ``celery``, Celery's prefork drain as well."""
    loops = loops or calibrate()
    figures: dict[str, float] = {}
    for processes in ("0", "1", "2", "auto"):
        figures[f"{report.PROCESSES_CPU}{processes}"] = drain(
            processes, "cpu", cpu_jobs, loops, f"{tag}-cpu-{processes}"
        )
        if celery and processes == "2":
            # Right after the figure it is compared with, under the same load.
            figures[CELERY] = celery_drain(cpu_jobs, loops)
    for processes in ("0", "1", "2"):
        figures[f"{report.PROCESSES_NOOP}{processes}"] = drain(
            processes, "noop", noop_jobs, 0, f"{tag}-noop-{processes}"
        )
    figures[report.KILL_TO_WORKER_LOST] = kill_to_requeue(f"{tag}-kill") * 1000
    # Beside the --processes 2 drain above, in the same repetition.
    figures.update(start_figures(f"{tag}-start", loops, cpu_jobs, plain=False))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-jobs", type=int, default=4000)
    parser.add_argument("--noop-jobs", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-celery", action="store_true", help="leave out Celery's prefork drain")
    parser.add_argument(
        "--starts",
        action="store_true",
        help="only the children's starts: start time, recycling drain, kill -9 to running again",
    )
    parser.add_argument(
        "--again-samples",
        type=int,
        default=3,
        help="kills of a child under a backlog of 3,000, per run (--starts)",
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args(argv)
    prepare_database(args.database_url)
    loops = calibrate()
    rows: dict[str, list[float]] = {}
    stamp = time.strftime("%H%M%S")
    for run in range(args.runs):
        if args.starts:
            figures = start_figures(
                f"{stamp}-{run}", loops, args.cpu_jobs, again_samples=args.again_samples
            )
        else:
            figures = measure(
                args.cpu_jobs, args.noop_jobs, f"{stamp}-{run}", loops, celery=not args.no_celery
            )
        for name, value in figures.items():
            rows.setdefault(name, []).append(value)
    cpus = os.cpu_count() or 1
    print(f"\n{cpus} CPUs; a CPU-bound job is {loops:,} loops (about 20 ms); {args.runs} run(s)")
    # The same tables and goals as ``python -m bench``'s (bench/report.py): ratios within
    # each repetition, then their median.
    print(report.figures_table(rows))
    print()
    print(report.side_by_side(rows))
    print()
    print(report.checks_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
