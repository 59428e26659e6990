"""Procrastinate's loops, as its documentation shows them: ``task.defer()``,
``task.batch_defer()`` and ``app.run_worker()``, on a database of their own.

``python procrastinate_loops.py FIGURE --url URL [--jobs N] [--batch B] [--concurrency C]``,
FIGURE one of ``enqueue`` (one ``defer`` per transaction), ``enqueue-many`` (``batch_defer``
of ``--batch`` jobs), ``drain`` (jobs deferred in batches, then a worker at ``--concurrency``
that stops once the queue is empty: jobs / the worker's run), ``pickup`` (an idle worker at
concurrency 4 with LISTEN/NOTIFY, jobs deferred ``--pickup-gap`` ms apart), ``worker`` (the
pickup's worker process).

The pickup's latency runs from the clock reading just before ``defer()`` is called (sent as
the task's argument) to the task's own clock reading as it begins, in the worker: the same
span as django_jobs' (``run_at``, read as ``enqueue`` begins, to ``started_at``, read as the
executor calls the runner) and the bare loop's. The database's stamps (the job's ``started``
event - its ``deferred`` event) leave out both ends: the ``defer`` call's Python and its trip
to the server, and the claim's own statement, its commit and its trip back, and the worker
handing the job to the task. They are reported too, as ``(database stamps)``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time

import procrastinate
from common import connect, emit, parser, percentile, rate, wait_for

logging.getLogger("procrastinate").setLevel(logging.ERROR)


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="default")
    def noop(n: int) -> None:
        return None

    @app.task(name="stamp", queue="default")
    def stamp(n: int, at: float) -> None:
        """The pickup's job: its latency, from ``at`` (read before ``defer``) to now."""
        latency = time.time() - at
        with open(os.environ[PICKUP_OUT], "a") as out:
            out.write(f"{n} {latency * 1000}\n")

    app.noop = noop  # type: ignore[attr-defined]
    app.stamp = stamp  # type: ignore[attr-defined]
    return app


#: The variable naming the file the pickup worker writes each job's latency to.
PICKUP_OUT = "BENCH_PICKUP_OUT"


def prepare(url: str) -> None:
    """Apply Procrastinate's schema once; empty its tables."""
    with connect(url) as conn:
        if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()[0] is None:
            app = make_app(url)
            with app.open():
                app.schema_manager.apply_schema()
        conn.execute(
            "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers "
            "RESTART IDENTITY CASCADE"
        )
        conn.execute("VACUUM ANALYZE procrastinate_jobs")


def count(url: str, status: str) -> int:
    with connect(url) as conn:
        return conn.execute(
            "SELECT COUNT(*) FROM procrastinate_jobs WHERE status = %s", [status]
        ).fetchone()[0]


def defer_in_batches(app: procrastinate.App, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        app.noop.batch_defer(*({"n": i} for i in range(start, min(start + batch, n))))


def pickup(url: str, n: int, gap: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "latencies")
        return _pickup(url, n, gap, out)


def _pickup(url: str, n: int, gap: float, out: str) -> dict[str, float]:
    worker = subprocess.Popen(
        [sys.executable, __file__, "worker", "--url", url], env={**os.environ, PICKUP_OUT: out}
    )
    try:
        with connect(url) as conn:

            def listening() -> bool:
                return (
                    conn.execute(
                        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND query LIKE 'LISTEN %%'"
                    ).fetchone()[0]
                    > 0
                )

            wait_for(listening, 60, "the Procrastinate worker's LISTEN")
        app = make_app(url)
        with app.open():
            for i in range(-20, 0):  # warm-up: negative n, left out below
                app.stamp.defer(n=i, at=time.time())
                time.sleep(gap)
            wait_for(lambda: count(url, "succeeded") >= 20, 30, "the warm-up jobs")
            with connect(url) as conn:
                first_id = conn.execute("SELECT MAX(id) FROM procrastinate_jobs").fetchone()[0]
            began = time.perf_counter()
            for i in range(n):
                pause = began + i * gap - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                app.stamp.defer(n=i, at=time.time())
            wait_for(lambda: count(url, "succeeded") >= n + 20, 60, "the paced jobs")
        with connect(url) as conn:
            stamped = [
                row[0]
                for row in conn.execute(
                    "SELECT EXTRACT(EPOCH FROM s.at - d.at) * 1000 FROM procrastinate_events d "
                    "JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'started' "
                    "WHERE d.type = 'deferred' AND d.job_id > %s",
                    [first_id],
                )
            ]
    finally:
        worker.terminate()
        worker.wait(30)
    with open(out) as lines:
        latencies = [float(ms) for n, ms in map(str.split, lines) if int(n) >= 0]
    if len(latencies) != n:
        raise SystemExit(f"The Procrastinate pickup stamped {len(latencies)} jobs of {n}.")
    stamped = [float(value) for value in stamped]
    return {
        "procrastinate: pickup p50": percentile(latencies, 50),
        "procrastinate: pickup p95": percentile(latencies, 95),
        "procrastinate: pickup p99": percentile(latencies, 99),
        "procrastinate: pickup p50 (database stamps)": percentile(stamped, 50),
        "procrastinate: pickup p99 (database stamps)": percentile(stamped, 99),
    }


def main() -> None:
    args = parser(__doc__.split("\n")[0]).parse_args()
    url, n = args.url, args.jobs
    app = make_app(url)
    if args.figure == "worker":
        app.run_worker(concurrency=4, wait=True, listen_notify=True)
        return
    prepare(url)
    if args.figure == "enqueue":
        with app.open():

            def run() -> None:
                for i in range(n):
                    app.noop.defer(n=i)

            emit({"procrastinate: enqueue": rate(n, run)})
    elif args.figure == "enqueue-many":
        with app.open():
            emit(
                {
                    "procrastinate: enqueue_many": rate(
                        n, lambda: defer_in_batches(app, n, args.batch)
                    )
                }
            )
    elif args.figure == "drain":
        with app.open():
            defer_in_batches(app, n, args.batch)
        with connect(url) as conn:
            conn.execute("VACUUM ANALYZE procrastinate_jobs")
        figure = rate(
            n,
            lambda: app.run_worker(
                concurrency=args.concurrency, wait=False, install_signal_handlers=False
            ),
        )
        if count(url, "succeeded") != n:
            raise SystemExit(f"Procrastinate ran {count(url, 'succeeded')} jobs of {n}.")
        emit({f"procrastinate: drain c={args.concurrency}": figure})
    elif args.figure == "pickup":
        emit(pickup(url, args.pickup_jobs, args.pickup_gap / 1000))
    else:
        raise SystemExit(f"Unknown figure {args.figure!r}.")
    prepare(url)


if __name__ == "__main__":
    main()
