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
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # ``python bench/run.py`` puts bench/ first, not the root
    sys.path.insert(0, str(ROOT))

from bench import peers, peers_env, report  # noqa: E402 - needs the root on sys.path first

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jobs_bench"
SETTINGS = "bench.settings"
READY = "runjobs: worker"
FIGURES = ("enqueue", "drain", "async", "steps", "pickup", "peers", "processes", "tracing")
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


# -- set-up -----------------------------------------------------------------------------------


def prepare_database(url: str) -> None:
    """Create the benchmark database if it is missing, set up Django on it and migrate."""
    parsed = urlparse(url)
    name = unquote(parsed.path.lstrip("/"))
    if "bench" not in name:
        raise SystemExit(
            f"Refusing to use database {name!r}: the benchmark empties the job table. "
            "Pass a --database-url whose database name contains 'bench'."
        )
    admin_url = parsed._replace(path="/postgres").geturl()
    with peers.connect(admin_url) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            admin.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def claim_due(store: Any, worker_id: str, limit: int) -> list[Any]:
    """Claim up to ``limit`` due jobs of the default engine for ``worker_id`` (leased 30 s)
    straight from the store, as ``bench.phases`` and ``bench.fanout`` do: with a ``Claim``,
    or with its fields as keywords for an engine from before it (``--against`` a revision)."""
    from django_jobs import clock

    now = clock.now()
    fields = {
        "engine": "default",
        "worker_id": worker_id,
        "limit": limit,
        "now": now,
        "leased_until": now + timedelta(seconds=30),
    }
    try:
        from django_jobs.store import Claim
    except ImportError:
        return store.claim(**fields)
    return store.claim(Claim(**fields))


def forget_ids_in_hand() -> None:
    """The ids this process's engine drew ahead came from the sequence ``reset`` restarts: an
    enqueue within seconds of it would insert one of them again. (An engine of an older
    revision, ``--against`` it, may have no ids drawn ahead or no ``forget``.)"""
    try:
        from django_jobs.store.postgres import job_ids
    except ImportError:
        return
    forget = getattr(job_ids, "forget", None)
    if forget is not None:
        forget()


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_jobs_job RESTART IDENTITY CASCADE")
        forget_ids_in_hand()
        cursor.execute("VACUUM ANALYZE django_jobs_job")
        # The staging table of job.created rows enqueued inside a transaction (PostgreSQL,
        # an engine with migration 0012) holds only dead rows between transactions, which
        # autovacuum clears; this machine may run with it off, as it is for the job table.
        cursor.execute("SELECT to_regclass('django_jobs_stagedevent') IS NOT NULL")
        if cursor.fetchone()[0]:
            cursor.execute("VACUUM django_jobs_stagedevent")


def sql(query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(query, params or [])
        return cursor.fetchall()


def check_all_succeeded(expected: int, since_id: int = 0, kind: str | None = None) -> None:
    from bench.jobs import KIND

    rows = sql(
        "SELECT state, COUNT(*) FROM django_jobs_job WHERE kind = %s AND id > %s GROUP BY state",
        [kind or KIND, since_id],
    )
    counts = dict(rows)
    if counts != {"succeeded": expected}:
        raise SystemExit(f"Expected {expected} succeeded jobs, found {counts}.")


# -- figures ----------------------------------------------------------------------------------


def timed(fn: Callable[[], int]) -> tuple[float, float]:
    """Run ``fn`` (which returns how many jobs it did); return (jobs/s, CPU us per job)."""
    wall, cpu = time.perf_counter(), time.process_time()
    n = fn()
    return n / (time.perf_counter() - wall), (time.process_time() - cpu) / n * 1e6


def enqueue_one_per_transaction(n: int, tag: str, *, atomic: bool = False) -> tuple[float, float]:
    from django.db import transaction

    from bench.jobs import noop

    def run() -> int:
        if atomic:
            for i in range(n):
                with transaction.atomic():
                    noop.enqueue({"n": i, "run": tag})
        else:
            for i in range(n):
                noop.enqueue({"n": i, "run": tag})
        return n

    return timed(run)


PRODUCERS = 4


def _produce(n: int, batch: int, tag: str, go: Any) -> None:
    from bench.jobs import noop

    noop.enqueue({"warm-up": tag, "pid": os.getpid()})  # connects and prepares first
    go.wait()
    payloads = [{"n": i, "run": tag, "pid": os.getpid()} for i in range(n)]
    if batch == 1:
        for payload in payloads:
            noop.enqueue(payload)
    else:
        for start in range(0, n, batch):
            noop.enqueue_many(payloads[start : start + batch])


def enqueue_from_processes(n: int, tag: str, *, batch: int = 1) -> float:
    """``n`` jobs enqueued by ``PRODUCERS`` forked processes at once: one per transaction, or
    with ``enqueue_many`` in batches of ``batch``."""
    import multiprocessing

    from django.db import connections

    connections.close_all()  # a forked child must open its own connection
    context = multiprocessing.get_context("fork")
    go = context.Event()
    each = n // PRODUCERS
    producers = [
        context.Process(target=_produce, args=(each, batch, tag, go)) for _ in range(PRODUCERS)
    ]
    for producer in producers:
        producer.start()
    time.sleep(2)  # let every producer connect and warm up
    began = time.perf_counter()
    go.set()
    for producer in producers:
        producer.join()
        if producer.exitcode != 0:
            raise SystemExit(f"An enqueuing process exited with {producer.exitcode}.")
    rate = each * PRODUCERS / (time.perf_counter() - began)
    (stored,) = sql("SELECT COUNT(*) FROM django_jobs_job WHERE payload ? 'n'")[0]
    if stored != each * PRODUCERS:
        raise SystemExit(f"Expected {each * PRODUCERS} enqueued jobs, found {stored}.")
    return rate


def enqueue_in_batches(n: int, batch: int, tag: str) -> tuple[float, float]:
    from bench.jobs import noop

    payloads = [{"n": i, "run": tag} for i in range(n)]

    def run() -> int:
        for start in range(0, n, batch):
            noop.enqueue_many(payloads[start : start + batch])
        return n

    return timed(run)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_pythonpath() -> str:
    """The PYTHONPATH of a benchmark subprocess started with ``python -P``: this process's
    (``--against`` puts a revision's engine first there), then the repository's root."""
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*path, str(ROOT)])


class Worker:
    """One ``manage.py runjobs`` subprocess; notes when its ready line appears."""

    def __init__(
        self, *args: str, prefix: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        """``prefix``: run under it (``ip netns exec NAME``, which execs: the pid is the
        worker's); ``env``: variables over this process's (its ``DATABASE_URL``)."""
        # -P: manage.py's folder is not put first on the path, so the engine is whichever
        # PYTHONPATH names first (``--against`` puts a revision's there), the root after it.
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": engine_pythonpath(),
            **(env or {}),
        }
        self.spawned = time.time()
        self.popen = subprocess.Popen(
            [
                *(prefix or []),
                sys.executable,
                "-P",
                str(ROOT / "manage.py"),
                "runjobs",
                "--no-scheduler",
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.ready_at: float | None = None
        self.ready_cpu = 0.0
        self.ready = threading.Event()
        self.output: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if self.ready_at is None and line.startswith(READY):
                self.ready_at = time.time()
                self.ready_cpu = cpu_seconds(self.popen.pid)
                self.ready.set()
            self.output.append(line)
        self.ready.set()

    def wait_ready(self, timeout: float = 120) -> float:
        if not self.ready.wait(timeout) or self.ready_at is None:
            self.popen.kill()
            raise SystemExit("The worker did not start:\n" + "".join(self.output))
        return self.ready_at

    def wait(self, timeout: float = 600) -> float:
        """Wait for the exit; return the CPU seconds the worker used after its ready line."""
        watchdog = threading.Timer(timeout, self._kill_stuck)
        watchdog.start()
        try:
            _, status, usage = os.wait4(self.popen.pid, 0)
        finally:
            watchdog.cancel()
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        self.reader.join(5)
        if self.popen.returncode != 0:
            raise SystemExit(f"runjobs exited {self.popen.returncode}:\n" + "".join(self.output))
        return usage.ru_utime + usage.ru_stime - self.ready_cpu

    def _kill_stuck(self) -> None:
        """The watchdog's: every thread's stack into the output first (SIGUSR1, which the
        supervisor passes on to its worker processes), for the report to show where it
        hung, then SIGKILL."""
        try:
            self.popen.send_signal(signal.SIGUSR1)
            time.sleep(2)
            self.popen.kill()
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        self.wait(60)


def drain(concurrency: int, expected: int, kind: str | None = None) -> tuple[float, float]:
    """Run one burst worker; return (jobs/s from ready to the last end, CPU us per job)."""
    worker = Worker("--burst", "--concurrency", str(concurrency))
    ready = worker.wait_ready()
    cpu = worker.wait()
    check_all_succeeded(expected, kind=kind)
    (last_end,) = sql("SELECT MAX(ended_at) FROM django_jobs_job")[0]
    return expected / (last_end.timestamp() - ready), cpu / expected * 1e6


def drain_kind(handle: Any, n: int, batch: int, tag: str, concurrency: int) -> float:
    """Empty the table, enqueue ``n`` jobs of ``handle`` in batches, drain them with one burst
    worker of ``concurrency``; return its rate (jobs/s)."""
    reset()
    payloads = [{"n": i, "run": tag} for i in range(n)]
    for start in range(0, n, batch):
        handle.enqueue_many(payloads[start : start + batch])
    rate, _ = drain(concurrency, n, handle.kind)
    return rate


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


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"Timed out waiting for {what}.")
        time.sleep(0.02)


def listening() -> bool:
    return (
        sql(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN %%'"
        )[0][0]
        > 0
    )


#: Pickup jobs run before the timed ones: the worker's connections, caches and prepared
#: statements are warm when timing begins.
PICKUP_WARM_UP = 20


def pickups_succeeded(after_id: int) -> int:
    """How many ``bench.pickup`` jobs with an id above ``after_id`` have succeeded."""
    from bench.jobs import PICKUP_KIND

    return sql(
        "SELECT COUNT(*) FROM django_jobs_job WHERE kind = %s AND id > %s AND state = 'succeeded'",
        [PICKUP_KIND, after_id],
    )[0][0]


def paced_pickups(
    n: int, gap: float, tag: str, on_enqueued: Callable[[Any, float], None] | None = None
) -> int:
    """Warm the listening worker up, then enqueue ``n`` ``bench.pickup`` jobs ``gap`` s apart
    (paced from one start, so a slow enqueue does not push the later ones back) and wait until
    they have run. Each job carries the clock reading just before its ``enqueue`` (``at``),
    also given to ``on_enqueued(job, at)``. Returns the largest job id before the paced ones.
    The pickup figure and ``bench.pickup_trace`` both time jobs sent this way."""
    from bench.jobs import pickup as stamp

    for i in range(PICKUP_WARM_UP):
        stamp.enqueue({"warm": i, "run": tag, "at": time.time()})
        time.sleep(gap)
    wait_for(lambda: pickups_succeeded(0) >= PICKUP_WARM_UP, 30, "the warm-up jobs")
    (first_id,) = sql("SELECT COALESCE(MAX(id), 0) FROM django_jobs_job")[0]
    began = time.perf_counter()
    for i in range(n):
        pause = began + i * gap - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        at = time.time()
        job = stamp.enqueue({"n": i, "run": tag, "at": at})
        if on_enqueued is not None:
            on_enqueued(job, at)
    wait_for(lambda: pickups_succeeded(first_id) >= n, 60, "the paced jobs to run")
    return first_id


def pickup(n: int, gap: float, concurrency: int, tag: str) -> tuple[float, float, float]:
    """Latency from the clock reading before ``enqueue`` to the runner's start, in ms: p50, p95,
    p99 (each job's runner returns its own, ``bench.jobs.pickup``)."""
    from bench.jobs import PICKUP_KIND

    worker = Worker("--concurrency", str(concurrency))
    try:
        worker.wait_ready()
        wait_for(listening, 30, "the worker's LISTEN connection")
        first_id = paced_pickups(n, gap, tag)
    finally:
        worker.stop()
    check_all_succeeded(n, since_id=first_id, kind=PICKUP_KIND)
    latencies = [
        float(row[0]) for row in sql("SELECT result FROM django_jobs_job WHERE id > %s", [first_id])
    ]
    return percentile(latencies, 50), percentile(latencies, 95), percentile(latencies, 99)


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
    args: argparse.Namespace, only: set[str], tag: str, results: Results, python: Path | None
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
        run_once(args, only, f"{stamp}-{run}", results, python)
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
