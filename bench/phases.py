"""CPU time per job of each phase of the hot path, in one process: ``python -m bench.phases``.

Enqueue (one and many), claim, execute and record run one after another on one thread, with
the live events receiver disconnected, and each is timed with ``time.process_time``: the
engine's own cost, with no worker threads and no waiting counted. The minimum over
``--runs`` repetitions is printed: on a shared machine other processes only ever add time.
"""

from __future__ import annotations

import argparse
import os
import time

from bench.engine_paths import engine_name
from bench.harness import DEFAULT_URL, claim_due, prepare_database, reset


def measure(jobs: int) -> dict[str, float]:
    from bench.jobs import noop
    from django_jobs.store import get_store

    live_state = engine_name("django_jobs.engine.run.context", "LiveState")
    executor_class = engine_name("django_jobs.engine.run.executor", "Executor")

    store, executor = get_store(), executor_class("bench-phases")
    reset()
    payloads = [{"n": i} for i in range(jobs)]
    started = time.process_time()
    for start in range(0, jobs, 1000):
        noop.enqueue_many(payloads[start : start + 1000])
    many = time.process_time() - started
    started = time.process_time()
    for i in range(200):
        noop.enqueue({"one": i})
    one = time.process_time() - started
    claim = execute = record = 0.0
    while True:
        started = time.process_time()
        claimed = claim_due(store, "bench-phases", 64)
        ran = time.process_time()
        claim += ran - started
        if not claimed:
            break
        outcomes = [executor.run(job, live_state(job)) for job in claimed]
        recorded = time.process_time()
        execute += recorded - ran
        store.record(outcomes)
        record += time.process_time() - recorded
    total = jobs + 200
    return {
        "enqueue": one / 200 * 1e6,
        "enqueue_many": many / jobs * 1e6,
        "claim": claim / total * 1e6,
        "execute": execute / total * 1e6,
        "record": record / total * 1e6,
    }


def best(jobs: int, runs: int) -> dict[str, float]:
    """Each phase's CPU us per job: the minimum over ``runs`` measurements."""
    found: dict[str, float] = {}
    for _ in range(runs):
        for phase, value in measure(jobs).items():
            found[phase] = min(found.get(phase, value), value)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.phases", description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=3_200)
    args = parser.parse_args()
    os.environ["BENCH_LIVE_EVENTS"] = "0"
    prepare_database(args.database_url)
    found = best(args.jobs, args.runs)
    reset()
    print("CPU us per job (minimum of the runs):")
    for phase, value in found.items():
        print(f"  {phase:<14}{value:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
