"""DBOS's loops (``dbos`` 3.x), as its documentation shows them: a ``@DBOS.workflow()`` that
calls three ``@DBOS.step()`` functions, a queue from ``DBOS.register_queue`` and
``DBOS.enqueue_workflow``, on a database of their own.

``python dbos_loops.py FIGURE --url URL [--jobs N] [--concurrency C]``, FIGURE one of:

- ``drain``: ``--jobs`` workflows of three no-op steps enqueued by a DBOS process that
  listens to no queue, then a DBOS process whose queue runs ``--concurrency`` workflows at
  once (``worker_concurrency`` and ``global_concurrency``), polled every 10 ms
  (``polling_interval_sec=0.01``; DBOS's default is 1 s): jobs / (the last workflow's
  ``updated_at`` - the moment before ``DBOS.launch()``);
- ``pickup``: an idle DBOS worker process with a queue as DBOS's documentation declares one
  (``DBOS.register_queue(name)``: its default 1 s poll, no concurrency limit; a limit of 4
  would let each poll start at most 4 workflows, fewer than arrive in a second),
  no-op workflows (no step) enqueued ``--pickup-gap`` ms apart; latency = the workflow's
  ``started_at_epoch_ms`` - its ``created_at``, both stamped by DBOS;
- ``worker``: the pickup's worker process;
- ``kill-drain``: the drain of ``python -m bench.steps_kill`` (concurrency 4, 10 ms poll),
  each step body creating a file in ``--runs-dir`` (``WORKFLOW.STEP.UNIQUE``) before it
  returns; with ``--enqueue`` it first empties the tables and enqueues ``--jobs``
  workflows. It exits once every workflow succeeded; killed, it is started again without
  ``--enqueue`` and DBOS recovers the workflows its executor left pending;
- ``statements``: ``--jobs`` three-step workflows drained at concurrency 1 with every SQL
  statement and commit DBOS's engine sends counted (SQLAlchemy's engine events): per job.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from common import connect, emit, parser, percentile, wait_for
from dbos import DBOS, DBOSConfig

logging.getLogger("dbos").setLevel(logging.WARNING)

QUEUE = "bench"
PICKUP_QUEUE = "bench_pickup"
#: The queue's poll for the drains: DBOS's default is 1 s, the least it allows is above 0.
DRAIN_POLL = 0.01
#: Where the step bodies of ``kill-drain`` leave a file each (set from ``--runs-dir``).
RUNS_DIR: Path | None = None


def body(name: str) -> None:
    """A step's body: nothing, or (``kill-drain``) a file that says it ran."""
    if RUNS_DIR is not None:
        path = RUNS_DIR / f"{DBOS.workflow_id}.{name}.{uuid.uuid4().hex}"
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


@DBOS.step()
def one() -> None:
    body("one")


@DBOS.step()
def two() -> None:
    body("two")


@DBOS.step()
def three() -> None:
    body("three")


@DBOS.workflow()
def three_steps(n: int) -> None:
    one()
    two()
    three()


@DBOS.workflow()
def noop(n: int) -> None:
    return None


def sqlalchemy_url(url: str) -> str:
    """DBOS takes a SQLAlchemy URL: the psycopg 3 driver named."""
    return "postgresql+psycopg://" + url.split("://", 1)[1]


def start(url: str, executor: str, listen: list[str] | None = None) -> None:
    """Construct and launch DBOS as ``executor``; ``listen``: the only queues it dequeues."""
    config: DBOSConfig = {
        "name": "bench",
        "system_database_url": sqlalchemy_url(url),
        "executor_id": executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    if listen is not None:
        DBOS.listen_queues(listen)
    DBOS.launch()


def prepare(url: str) -> None:
    """DBOS's schema once; its workflow tables emptied."""
    DBOS.migrate(sqlalchemy_url(url))
    with connect(url) as conn:
        conn.execute("TRUNCATE dbos.workflow_status, dbos.operation_outputs CASCADE")
        conn.execute("VACUUM ANALYZE dbos.workflow_status")
        conn.execute("VACUUM ANALYZE dbos.operation_outputs")


def enqueue(url: str, n: int, concurrency: int, poll: float) -> None:
    """Register the queue and enqueue ``n`` three-step workflows from a DBOS process that
    dequeues nothing (so none starts before the drain)."""
    start(url, "bench-producer", listen=["bench-none"])
    DBOS.register_queue(
        QUEUE,
        worker_concurrency=concurrency,
        global_concurrency=concurrency,
        polling_interval_sec=poll,
        on_conflict="always_update",
    )
    for i in range(n):
        DBOS.enqueue_workflow(QUEUE, three_steps, i)
    DBOS.destroy()


def statuses(url: str) -> dict[str, int]:
    with connect(url) as conn:
        return dict(
            conn.execute(
                "SELECT status, COUNT(*) FROM dbos.workflow_status GROUP BY status"
            ).fetchall()
        )


def succeeded(url: str) -> int:
    with connect(url) as conn:
        return conn.execute(
            "SELECT COUNT(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
        ).fetchone()[0]


def check_drained(url: str, n: int, steps: int) -> None:
    found = statuses(url)
    if found != {"SUCCESS": n}:
        raise SystemExit(f"DBOS: expected {n} workflows in SUCCESS, found {found}.")
    with connect(url) as conn:
        stored = conn.execute("SELECT COUNT(*) FROM dbos.operation_outputs").fetchone()[0]
    if stored != n * steps:
        raise SystemExit(f"DBOS: expected {n * steps} stored step outputs, found {stored}.")


def drain(url: str, n: int, concurrency: int) -> float:
    prepare(url)
    enqueue(url, n, concurrency, DRAIN_POLL)
    began = time.time()
    start(url, "bench-worker")
    wait_for(lambda: succeeded(url) >= n, 1800, "DBOS's workflows")
    with connect(url) as conn:
        (last,) = conn.execute("SELECT MAX(updated_at) FROM dbos.workflow_status").fetchone()
    DBOS.destroy()
    check_drained(url, n, 3)
    return n / (last / 1000 - began)


def statements(url: str, n: int) -> dict[str, float]:
    """Statements and commits DBOS's SQLAlchemy engines send per three-step workflow at
    concurrency 1, its worker's polls included (10 ms apart)."""
    import sqlalchemy as sa

    prepare(url)
    enqueue(url, n, 1, DRAIN_POLL)
    counted = {"statements": 0, "commits": 0}
    texts: dict[str, int] = {}

    def on_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        counted["statements"] += 1
        key = " ".join(statement.split())[:60]
        texts[key] = texts.get(key, 0) + 1

    def on_commit(conn: Any) -> None:
        counted["commits"] += 1

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", on_statement)
    sa.event.listen(sa.engine.Engine, "commit", on_commit)
    start(url, "bench-worker")
    wait_for(lambda: succeeded(url) >= n, 600, "DBOS's workflows")
    DBOS.destroy()
    check_drained(url, n, 3)
    for text, times in sorted(texts.items(), key=lambda item: -item[1]):
        print(f"{times / n:8.2f}  {text}", file=sys.stderr)
    return {
        "dbos: statements per 3-step job (n)": counted["statements"] / n,
        "dbos: commits per 3-step job (n)": counted["commits"] / n,
    }


def pickup(url: str, n: int, gap: float) -> dict[str, float]:
    prepare(url)
    worker = subprocess.Popen([sys.executable, __file__, "worker", "--url", url])
    try:
        start(url, "bench-producer", listen=["bench-none"])
        queue = None
        deadline = time.monotonic() + 60
        while queue is None:  # the worker registers it once launched
            if time.monotonic() > deadline:
                raise SystemExit("Timed out waiting for the DBOS worker's queue.")
            time.sleep(0.05)
            queue = DBOS.retrieve_queue(PICKUP_QUEUE)
        for i in range(20):
            DBOS.enqueue_workflow(PICKUP_QUEUE, noop, -1 - i)
            time.sleep(gap)
        wait_for(lambda: succeeded(url) >= 20, 60, "the warm-up workflows")
        with connect(url) as conn:
            (after,) = conn.execute("SELECT MAX(created_at) FROM dbos.workflow_status").fetchone()
        began = time.perf_counter()
        for i in range(n):
            pause = began + i * gap - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            DBOS.enqueue_workflow(PICKUP_QUEUE, noop, i)
        wait_for(lambda: succeeded(url) >= n + 20, 120, "the paced workflows")
        DBOS.destroy()
        with connect(url) as conn:
            latencies = [
                float(row[0])
                for row in conn.execute(
                    "SELECT started_at_epoch_ms - created_at FROM dbos.workflow_status "
                    "WHERE created_at > %s",
                    [after],
                )
            ]
    finally:
        worker.terminate()
        worker.wait(30)
    if len(latencies) != n:
        raise SystemExit(f"DBOS: expected {n} paced workflows, found {len(latencies)}.")
    return {
        "dbos: pickup p50 (1 s poll)": percentile(latencies, 50),
        "dbos: pickup p95 (1 s poll)": percentile(latencies, 95),
        "dbos: pickup p99 (1 s poll)": percentile(latencies, 99),
    }


def worker(url: str) -> None:
    """The pickup's idle worker: DBOS's default queue (1 s poll, no limit); until SIGTERM."""
    start(url, "bench-worker")
    DBOS.register_queue(PICKUP_QUEUE, on_conflict="always_update")
    while True:
        time.sleep(3600)


def kill_drain(url: str, n: int, runs_dir: Path, fresh: bool) -> None:
    global RUNS_DIR
    RUNS_DIR = runs_dir
    if fresh:
        prepare(url)
        enqueue(url, n, 4, DRAIN_POLL)
    start(url, "bench-worker")
    print("dbos: worker launched", flush=True)
    wait_for(lambda: succeeded(url) >= n, 600, "DBOS's workflows")
    DBOS.destroy()
    check_drained(url, n, 3)


def main() -> None:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--runs-dir", type=Path)
    p.add_argument("--enqueue", action="store_true")
    args = p.parse_args()
    url, n = args.url, args.jobs
    if args.figure == "drain":
        emit({f"dbos: 3 steps c={args.concurrency}": drain(url, n, args.concurrency)})
    elif args.figure == "pickup":
        emit(pickup(url, args.pickup_jobs, args.pickup_gap / 1000))
    elif args.figure == "worker":
        worker(url)
    elif args.figure == "kill-drain":
        kill_drain(url, n, args.runs_dir, args.enqueue)
    elif args.figure == "statements":
        emit(statements(url, n))
    else:
        raise SystemExit(f"Unknown figure {args.figure!r}.")


if __name__ == "__main__":
    main()
