"""Benchmark the PostgreSQL hot path beside its peers (``python -m bench --quick``: a smoke run).

Usage, from the repository root::

    python -m bench                  # or: python bench/run.py
    python -m bench --runs 5 --only enqueue,drain --json results.json
    python -m bench --runs 5 --against main   # main's engine beside the working tree's

It creates (if missing) and migrates its own database, ``jobs_bench`` on the local PostgreSQL
(``--database-url`` or ``BENCH_DATABASE_URL`` to change it; the name must contain "bench",
because every run empties the job table), then measures, each ``--runs`` times:

- ``enqueue``: ``noop.enqueue(payload)`` in autocommit, so one transaction per job
  (``enqueue in atomic``: each inside its own ``transaction.atomic()``);
- ``enqueue x4``: the same from four processes at once (``--jobs`` in all), as the web
  processes of a site enqueue;
- ``enqueue_many``: ``noop.enqueue_many(batch)`` in batches of ``--batch`` jobs (``x4``: from
  four processes at once);
- ``drain c=1`` and ``drain c=4``: one real ``manage.py runjobs --burst --concurrency N``
  subprocess drains the jobs just enqueued. The rate is ``jobs / (last ended_at - ready)``,
  where ``ready`` is the moment the worker printed its ready line (Django start-up excluded,
  the worker's own start included);
- ``pickup``: an idle, already started ``runjobs`` (not burst) while the load generator
  enqueues ``--pickup-jobs`` jobs ``--pickup-gap`` ms apart; the latency of a job runs from
  the generator's clock reading just before ``enqueue`` (in the payload) to the runner's
  own as it begins (``bench.pickup``), as the peers' pickups are timed;
- ``drain 3 steps c=1/4/50``, ``drain no-op c=4/50``: jobs of three durable steps that do
  nothing, beside no-ops, drained the same way (a fifth of ``--jobs`` each);
- ``bare: ...``, ``procrastinate: ...``, ``tasks-db: ...``, ``dbos: ...``: the peers' loops
  (see ``bench/peers.py``), each group right after django_jobs' figures of the same kind
  (DBOS's three-step workflows right after the steps figures). ``--only dbos``: the steps and
  pickup figures beside DBOS's, whatever ``--peers`` says;
- ``limits``: the no-op drain at ``c=4`` and the pickup of a kind with a ``timeout`` (so a
  soft and a hard time limit armed and disarmed for every job, none reached) beside the same
  kind without, one right after the other (which goes first alternates between repetitions);
- ``celery``: Celery's API over the engine (``django_jobs.celery``, ``bench/celery_layer.py``):
  a task's ``delay(n, tag)`` beside ``enqueue`` of a native kind with the same meaning (every
  call a job of its own), half ``--jobs`` each in autocommit, then the drains at ``c=4`` of the
  layer's jobs (arguments decoded, the task's ``run`` called) and of native no-ops; which goes
  first alternates between repetitions;
- ``processes``: drains with ``runjobs --processes 0, 1, 2, auto`` (CPU-bound jobs of about
  20 ms, a tenth of ``--jobs``; no-op jobs, ``--jobs``), Celery's prefork pool at concurrency 2
  on the same CPU-bound jobs, and the kill -9 of a worker process to its job's ``WORKER_LOST``
  (``bench/processes.py``);
- ``tracing``: enqueue and drain of half ``--jobs`` with tracing off, the API without an SDK,
  the SDK exporting nowhere (all spans, one trace in ten, bare spans), each in a process of
  its own (``bench/tracing.py``);
- ``--only stepskill``: the kill -9 check of durable steps, both engines (``bench/steps_kill.py``).

Every figure checks that each enqueued job succeeded. The report (``bench/report.py``) prints
every figure's runs and median, then django_jobs beside each peer with the median of the
per-repetition ratios and the goals; "cpu" rows are the CPU time of the enqueuing process or
of the worker process per job, which the load of other processes disturbs less than the wall
clock.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # ``python bench/run.py`` puts bench/ first, not the root
    sys.path.insert(0, str(ROOT))

from bench import peers, peers_env, report  # noqa: E402 - needs the root on sys.path first
from bench.harness import (  # noqa: E402
    DEFAULT_URL,
    drain,
    drain_kind,
    drain_kind_cpu,
    enqueue_from_processes,
    enqueue_in_batches,
    enqueue_one_per_transaction,
    pickup,
    prepare_database,
    reset,
)

FIGURES = (
    "enqueue",
    "drain",
    "async",
    "steps",
    "pickup",
    "limits",
    "celery",
    "peers",
    "processes",
    "tracing",
)
#: ``--only dbos``: django_jobs' steps and pickup figures beside DBOS's (bench/peers.py), the
#: DBOS loops whatever ``--peers`` names. Not a default of its own: the default ``peers`` has
#: DBOS among its ``--peers``.
DBOS_FIGURES = ("steps", "pickup")
#: DBOS's three-step drains take ``--jobs`` // this many workflows (1,000 by default): at its
#: 20 to 80 workflows/s here, a fifth (as django_jobs' steps figures) made DBOS's drains and
#: their enqueues about 2.5 minutes of each repetition; a tenth halves that, and a rate over
#: 15 to 50 s is still the steady one (DBOS's launch is about 0.1 s of it).
DBOS_DIVISOR = 10
#: Figures of the single-purpose modules, measured when ``--only`` names them (not by default:
#: ``bench.memory`` alone enqueues and drains ten times ``--jobs``). ``phases`` and ``fanout``
#: follow ``--live-events`` here; ``--against`` runs them with the live events off, as their own
#: commands do.
MODULE_FIGURES = ("phases", "fanout", "memory", "stepskill")


@dataclass
class Results:
    runs: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, value: float) -> None:
        self.runs.setdefault(name, []).append(value)
        print(f"  {name:<32}{value:>12,.2f} {report.unit(name)}", flush=True)

    def update(self, figures: dict[str, float]) -> None:
        for name, value in figures.items():
            self.runs.setdefault(name, []).append(value)


# -- figures ----------------------------------------------------------------------------------


ASYNC_CONCURRENCY = 50
ASYNC_SLEEPERS = 100


def async_figures(n: int, batch: int, tag: str, results: Results) -> None:
    """Async runners beside sync ones at the same concurrency: ``n`` no-ops of each, then
    ``ASYNC_SLEEPERS`` jobs that each await ``asyncio.sleep``: their wall time shows whether
    they overlap (one at a time would take ``ASYNC_SLEEPERS * ASYNC_SLEEP`` seconds)."""
    from bench.jobs import async_noop, async_sleep, noop

    for handle, figure in ((noop, "drain c=50"), (async_noop, "drain async c=50")):
        results.add(figure, drain_kind(handle, n, batch, tag, ASYNC_CONCURRENCY))
    reset()
    async_sleep.enqueue_many([{"n": i, "run": tag} for i in range(ASYNC_SLEEPERS)])
    rate, _ = drain(ASYNC_CONCURRENCY, ASYNC_SLEEPERS, async_sleep.kind)
    results.add(f"async sleep x{ASYNC_SLEEPERS} c=50 (s)", ASYNC_SLEEPERS / rate)


#: The concurrencies of the three-step figures (DBOS's loops take the same, bench/peers.py);
#: the no-op figure beside them at the ones with a goal (bench/report.py).
STEPS_CONCURRENCY = (1, 4, 50)
NOOP_CONCURRENCY = (4, 50)


def steps_figures(n: int, batch: int, tag: str, results: Results) -> None:
    """``n`` jobs of three durable steps at each of ``STEPS_CONCURRENCY``, beside ``n`` no-ops
    at each of ``NOOP_CONCURRENCY``, each drained by one burst worker."""
    from bench.jobs import noop, three_steps

    for c in STEPS_CONCURRENCY:
        if c in NOOP_CONCURRENCY:
            results.add(f"drain no-op c={c}", drain_kind(noop, n, batch, tag, c))
        results.add(f"drain 3 steps c={c}", drain_kind(three_steps, n, batch, tag, c))


#: The figures of a kind with a time limit, beside the same without (``limits``): names of
#: their own, apart from the ``drain`` and ``pickup`` groups' figures of the same loops.
LIMITED = " soft limit"
UNLIMITED = " no limit"


def limits_figures(args: argparse.Namespace, tag: str, results: Results, run: int) -> None:
    """The no-op drain at c=4 and the pickup, of a kind with a ``timeout`` and of one without,
    one right after the other; which goes first alternates with the repetition."""
    from bench.jobs import noop, noop_limited, pickup_limited

    sides = [(noop, None, UNLIMITED), (noop_limited, pickup_limited, LIMITED)]
    if run % 2 == 0:
        sides.reverse()
    for handle, _, suffix in sides:
        rate, cpu = drain_kind_cpu(handle, args.jobs, args.batch, tag, 4)
        results.add(f"drain c=4{suffix}", rate)
        # The worker's CPU per job: steadier than the rate, which moves with the machine.
        results.add(f"drain c=4{suffix} cpu", cpu)
    for _, stamp, suffix in sides:
        reset()
        p50, _, p99 = pickup(
            args.pickup_jobs, args.pickup_gap / 1000, args.pickup_concurrency, tag, stamp
        )
        results.add(f"pickup p50{suffix}", p50)
        results.add(f"pickup p99{suffix}", p99)


def celery_figures(args: argparse.Namespace, tag: str, results: Results, run: int) -> None:
    """Celery's API (``django_jobs.celery``) beside the native calls: ``delay()`` against
    ``enqueue``, then the drains at c=4; which goes first alternates with the repetition."""
    from bench import celery_layer

    layer_first = run % 2 == 1
    for name, value in celery_layer.enqueue_rates(args.jobs // 2 or 1, tag, layer_first).items():
        results.add(name, value)
    drains = celery_layer.drain_rates(args.jobs, args.batch, tag, layer_first)
    for name, value in drains.items():
        results.add(name, value)


def selected_peers(args: argparse.Namespace, only: set[str]) -> set[str]:
    """The peers whose loops run: ``--peers`` with ``--only peers``, and DBOS with ``dbos``."""
    return (args.peers if "peers" in only else set()) | ({"dbos"} if "dbos" in only else set())


def peer_figures(
    args: argparse.Namespace, python: Path, results: Results, group: str, chosen: set[str]
) -> None:
    """The loops of ``group`` of the ``chosen`` peers, one after the other (bench/peers.py).
    The steps group (DBOS's) takes a tenth of ``--jobs``: see ``DBOS_DIVISOR``."""
    loops = peers.selected(chosen, group)
    results.update(
        peers.run_loops(
            python,
            args.database_url,
            loops,
            jobs=(args.jobs // DBOS_DIVISOR or 1) if group == "steps" else args.jobs,
            batch=args.batch,
            pickup_jobs=args.pickup_jobs,
            pickup_gap=args.pickup_gap,
        )
    )


def run_once(
    args: argparse.Namespace,
    only: set[str],
    tag: str,
    results: Results,
    python: Path | None,
    run: int = 1,
) -> None:
    """One repetition. Each group of django_jobs' figures is followed at once by the same
    figures of the peers, so a ratio compares loops run seconds apart, not minutes."""

    chosen = selected_peers(args, only)

    def peers_of(group: str) -> None:
        if chosen and python is not None:
            peer_figures(args, python, results, group, chosen)

    if only & {"enqueue", "drain"}:
        if "enqueue" in only:  # next to the autocommit figure, its comparison
            reset()
            rate, _ = enqueue_one_per_transaction(max(args.jobs // 5, 1), tag, atomic=True)
            results.add("enqueue in atomic", rate)
        reset()
        rate, cpu = enqueue_one_per_transaction(args.jobs, tag)
        if "enqueue" in only:
            results.add("enqueue", rate)
            results.add("enqueue cpu", cpu)
        if "drain" in only:
            rate, cpu = drain(1, args.jobs)
            results.add("drain c=1", rate)
            results.add("drain c=1 cpu", cpu)
        peers_of("enqueue")
        if "enqueue" in only:
            reset()
            results.add("enqueue x4", enqueue_from_processes(args.jobs, tag))
        reset()
        rate, cpu = enqueue_in_batches(args.jobs, args.batch, tag)
        if "enqueue" in only:
            results.add("enqueue_many", rate)
            results.add("enqueue_many cpu", cpu)
        if "drain" in only:
            rate, cpu = drain(4, args.jobs)
            results.add("drain c=4", rate)
            results.add("drain c=4 cpu", cpu)
        peers_of("enqueue_many")
        peers_of("drain")
        if "enqueue" in only:
            reset()
            results.add("enqueue_many x4", enqueue_from_processes(args.jobs, tag, batch=args.batch))
    else:
        peers_of("enqueue")
        peers_of("enqueue_many")
        peers_of("drain")
    if "async" in only:
        async_figures(args.jobs // 10 or 1, args.batch, tag, results)
    if "steps" in only:
        steps_figures(args.jobs // 5 or 1, args.batch, tag, results)
    peers_of("steps")
    module_figures(args, only, results, tag)
    if "pickup" in only:
        reset()
        gap = args.pickup_gap / 1000
        p50, p95, p99 = pickup(args.pickup_jobs, gap, args.pickup_concurrency, tag)
        results.add("pickup p50", p50)
        results.add("pickup p95", p95)
        results.add("pickup p99", p99)
    peers_of("pickup")
    if "limits" in only:
        limits_figures(args, tag, results, run)
    if "celery" in only:
        celery_figures(args, tag, results, run)


def module_figures(
    args: argparse.Namespace, only: set[str], results: Results, tag: str = "module"
) -> None:
    """The figures of ``bench.phases``, ``bench.fanout`` and ``bench.memory``, so that
    ``--against`` can put them beside a revision's: one measurement each (the phases the
    minimum of three). Sizes follow ``--jobs``: 10,000 gives about the modules' own."""
    if "phases" in only:
        from bench import phases

        # The minimum of three, as its command takes: a single measurement would carry the
        # process's first-use costs (imports, the first prepare of each statement).
        for phase, value in phases.best(max(args.jobs // 3, 200), runs=3).items():
            results.add(f"phase {phase} cpu", value)
    if "fanout" in only:
        from bench import fanout

        results.add("fan-out: plain drain (s)", fanout.plain(args.jobs))
        results.add("fan-out: spawn and gather (s)", fanout.workflow(args.jobs))
        if importlib.util.find_spec("django_jobs.canvas") is not None:  # a revision before it
            results.add("fan-out: chord at the call site (s)", fanout.canvas(args.jobs))
    if "memory" in only:
        from bench import memory

        rss = memory.measure(args.jobs * 10)
        results.add("memory: enqueue_many (MiB)", rss["producer_last"])
        results.add("memory: enqueue_many growth (x)", rss["producer_last"] / rss["producer_first"])
        results.add("memory: worker (MiB)", rss["worker_last"])
        results.add("memory: worker growth (x)", rss["worker_last"] / rss["worker_first"])
    if "processes" in only:
        from bench import processes

        # Drains with runjobs --processes 0, 1, 2, auto and the kill -9 of a child.
        # Celery's prefork pool beside them, but not in a side of ``--against`` (it does not
        # change with the engine's revision).
        results.update(
            processes.measure(
                max(args.jobs // 10, 100), args.jobs, "processes", celery=not args.side
            )
        )
    if "tracing" in only:
        from bench import tracing

        # Enqueue and drain with tracing off, the API alone, the SDK (full, sampled, bare).
        done = len(results.runs.get(report.tracing_figure("drain", "off"), []))
        results.update(tracing.measure(args.jobs // 2, f"{tag}-tracing", args.database_url, done))
    if "stepskill" in only:
        from bench import steps_kill

        results.update(steps_kill.measure(args.database_url, max(args.jobs // 5, 100)))


QUICK = {"runs": 1, "jobs": 1_000, "batch": 250, "pickup_jobs": 50}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each figure")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per enqueue/drain run")
    parser.add_argument("--batch", type=int, default=1_000, help="enqueue_many batch size")
    parser.add_argument("--pickup-jobs", type=int, default=200)
    parser.add_argument("--pickup-gap", type=float, default=20, help="ms between paced jobs")
    parser.add_argument("--pickup-concurrency", type=int, default=4)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of about a minute (each can still be given): "
        + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items()),
    )
    parser.add_argument(
        "--only",
        default=",".join(FIGURES),
        help=f"comma-separated: {', '.join((*FIGURES, 'dbos', *MODULE_FIGURES))} "
        f"(default: {', '.join(FIGURES)})",
    )
    parser.add_argument(
        "--peers",
        default=",".join(peers.PEERS),
        help=f"comma-separated peers to run with --only peers: {', '.join(peers.PEERS)}",
    )
    parser.add_argument(
        "--live-events",
        choices=("on", "off"),
        default="on",
        help="off: disconnect the live events receiver (the engine alone)",
    )
    parser.add_argument("--json", type=Path, help="also write every run to this JSON file")
    parser.add_argument(
        "--against",
        metavar="REV",
        help="measure the engine of the git revision REV beside the working tree's, each "
        "repetition both, one after the other (bench/against.py); the peers are left out",
    )
    # One side of an --against run (bench/against.py starts it): measure, write the JSON.
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--tag", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:  # the quick sizes, unless given on the command line
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    args.only = {part.strip() for part in args.only.split(",") if part.strip()}
    known = (*FIGURES, "dbos", *MODULE_FIGURES)
    if args.only - set(known):
        parser.error(f"--only: unknown {sorted(args.only - set(known))}; use {', '.join(known)}")
    if "dbos" in args.only:
        args.only |= set(DBOS_FIGURES)
    args.peers = {part.strip() for part in args.peers.split(",") if part.strip()}
    if args.peers - set(peers.PEERS):
        parser.error(f"--peers: unknown {sorted(args.peers - set(peers.PEERS))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Read by bench.apps in this process and in every worker it starts.
    os.environ["BENCH_LIVE_EVENTS"] = "1" if args.live_events == "on" else "0"
    only = args.only
    if args.against:
        from bench import against

        return against.run(args, only)
    if args.side:
        return side(args, only - {"peers", "dbos"})
    python = None
    if selected_peers(args, only) or "stepskill" in only:
        python = peers_env.ensure()
        for suffix in peers.DATABASES:
            peers.create_database(peers.peers_url(args.database_url, suffix))
    prepare_database(args.database_url)
    results = Results()
    load_before = os.getloadavg()
    stamp = time.strftime("%Y%m%d%H%M%S")
    for run in range(1, args.runs + 1):
        print(f"run {run}/{args.runs}", flush=True)
        run_once(args, only, f"{stamp}-{run}", results, python, run)
    reset()
    load_after = os.getloadavg()
    import django
    import psycopg

    engine_versions = f"django {django.get_version()}, psycopg {psycopg.__version__}"
    results.notes.append(f"django_jobs with {engine_versions}, Python {sys.version.split()[0]}")
    if python is not None:
        found = peers_env.versions()
        results.notes.append("peers: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    results.notes.append(
        f"live events {args.live_events}; {args.runs} run(s) of {args.jobs:,} jobs "
        f"(batches of {args.batch:,}, pickup {args.pickup_jobs} jobs {args.pickup_gap:g} ms "
        f"apart); load average (1 min) before {load_before[0]:.2f}, after "
        f"{load_after[0]:.2f}, on {os.cpu_count()} CPUs"
    )
    print()
    print(report.figures_table(results.runs))
    print()
    print(report.side_by_side(results.runs))
    print()
    checks = report.checks_table(results.runs)
    if checks:
        print(checks)
        print()
    for note in results.notes:
        print(note)
    if args.json:
        args.json.write_text(json.dumps({"runs": results.runs, "notes": results.notes}, indent=2))
    return 0


def side(args: argparse.Namespace, only: set[str]) -> int:
    """One repetition of one side of an ``--against`` run: its figures, the engine it imported
    and the migration its database is at, as JSON."""
    prepare_database(args.database_url)
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    import django_jobs

    results = Results()
    run_once(args, only, args.tag or args.side, results, None)
    reset()
    leaves = MigrationLoader(connection).graph.leaf_nodes("django_jobs")
    found = {
        "runs": results.runs,
        "engine": str(Path(django_jobs.__file__).resolve().parent),
        "migration": ", ".join(name for _, name in leaves),
    }
    args.json.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
