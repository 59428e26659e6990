"""A fan-out of N no-op children and their gather, beside draining N plain jobs:
``python -m bench.fanout``.

Both run in one process on one thread, as ``bench.phases`` does (claim 64, execute, record,
until nothing is due), with the live events receiver disconnected: the figure is the engine's
cost of a workflow over the same work done as independent jobs. The plain side enqueues its
jobs with ``enqueue_many`` (batches of 1,000); the workflow side enqueues one parent, which
spawns its children in one step, waits, is woken by the last child's end and gathers their
results (read in pages of 1,000). The canvas side builds the same work at the call site, a
chord ``chain(group(noop.s(...) for each), chord_total.s({}))``, enqueued as one
``django_jobs.flow`` job: its members are validated at enqueue, spawned in one step, gathered,
then the callback is spawned and gathered in two more. The minimum wall time over ``--runs``
repetitions is printed.
"""

from __future__ import annotations

import argparse
import os
import time

from bench.engine_paths import engine_name
from bench.harness import DEFAULT_URL, claim_due, prepare_database, reset


def drain() -> int:
    from django_jobs.store import get_store

    live_state = engine_name("django_jobs.engine.run.context", "LiveState")
    executor_class = engine_name("django_jobs.engine.run.executor", "Executor")

    store, executor = get_store(), executor_class("bench-fanout")
    ran = 0
    while True:
        claimed = claim_due(store, "bench-fanout", 64)
        if not claimed:
            return ran
        store.record([executor.run(job, live_state(job)) for job in claimed])
        ran += len(claimed)


def fresh() -> None:
    """Empty the table, then start a new session: the engine's prepared statements were
    planned against the previous run's table (TRUNCATE invalidates them, and a generic plan
    re-made on the emptied table's statistics can be far slower), as a new worker's are not."""
    from django.db import connection

    reset()
    connection.close()


def plain(jobs: int) -> float:
    from bench.jobs import noop

    fresh()
    started = time.perf_counter()
    payloads = [{"n": i} for i in range(jobs)]
    for start in range(0, jobs, 1000):
        noop.enqueue_many(payloads[start : start + 1000])
    ran = drain()
    elapsed = time.perf_counter() - started
    assert ran == jobs, ran
    return elapsed


def workflow(jobs: int) -> float:
    from bench.jobs import fan_out
    from django_jobs.models import Job

    fresh()
    started = time.perf_counter()
    parent = fan_out.enqueue({"children": jobs})
    ran = drain()
    elapsed = time.perf_counter() - started
    parent.refresh_from_db()
    assert parent.state == "succeeded" and parent.result == jobs, (parent.state, parent.error)
    assert ran == jobs + 2, ran  # the parent runs twice: spawn, then gather
    assert Job.objects.filter(parent=parent, state="succeeded").count() == jobs
    return elapsed


def canvas(jobs: int) -> float:
    """A chord of ``jobs`` no-op members and a callback, built at the call site."""
    from bench.jobs import chord_total, noop
    from django_jobs import chain, group
    from django_jobs.models import Job

    fresh()
    started = time.perf_counter()
    flow = chain(group(noop.s({"n": i}) for i in range(jobs)), chord_total.s({})).enqueue()
    ran = drain()
    elapsed = time.perf_counter() - started
    flow.refresh_from_db()
    assert flow.state == "succeeded" and flow.result == jobs, (flow.state, flow.error)
    assert ran == jobs + 1 + 3, ran  # the flow runs three times: spawn, then callback, then end
    assert Job.objects.filter(parent=flow, state="succeeded").count() == jobs + 1
    return elapsed


def best(jobs: int, runs: int) -> tuple[float, float, float]:
    """The minimum wall time of ``runs`` plain drains, of ``runs`` fan-outs, of ``runs``
    chords built at the call site, taken in rounds of one each (a busy machine's load drifts:
    rounds put each side through the same stretches of it)."""
    rounds = [(plain(jobs), workflow(jobs), canvas(jobs)) for _ in range(runs)]
    return (
        min(r[0] for r in rounds),
        min(r[1] for r in rounds),
        min(r[2] for r in rounds),
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    os.environ["BENCH_LIVE_EVENTS"] = "0"
    prepare_database(args.database_url)
    best_plain, best_flow, best_chord = best(args.jobs, args.runs)
    reset()
    print(f"{args.jobs:,} jobs, minimum of {args.runs} runs:")
    print(f"  drain of plain jobs      {best_plain:7.2f} s  ({args.jobs / best_plain:,.0f} jobs/s)")
    print(f"  fan-out, then gather     {best_flow:7.2f} s  ({args.jobs / best_flow:,.0f} jobs/s)")
    print(f"  chord at the call site   {best_chord:7.2f} s  ({args.jobs / best_chord:,.0f} jobs/s)")
    print(f"  ratio (fan-out / plain)  {best_flow / best_plain:7.2f}")
    print(f"  ratio (chord / plain)    {best_chord / best_plain:7.2f}")
    print(f"  load average (1, 5, 15 min) {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
