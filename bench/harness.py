"""What every benchmark of ``bench/`` shares: its database (created and migrated, emptied
between figures, queried), the check that every job it enqueued succeeded, the enqueue loops,
the ``manage.py runjobs`` subprocess (``Worker``) and its burst drains, and the paced pickups
timed to an idle worker.

``bench.run`` builds its figures from these, as do the single-purpose modules
(``bench.phases``, ``bench.fanout``, ``bench.memory``, ``bench.processes``, ``bench.tracing``,
``bench.steps_kill``, ``bench.growth``, ``bench.fleet``, ``bench.claim_plans``,
``bench.partitions``, ``bench.pickup_trace``); none of them is imported here.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from bench import peers

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jobs_bench"
SETTINGS = "bench.settings"
READY = "runjobs: worker"


# -- the database -----------------------------------------------------------------------------


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


# -- enqueue ----------------------------------------------------------------------------------


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


# -- the worker -------------------------------------------------------------------------------


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
    rate, _ = drain_kind_cpu(handle, n, batch, tag, concurrency)
    return rate


def drain_kind_cpu(
    handle: Any, n: int, batch: int, tag: str, concurrency: int
) -> tuple[float, float]:
    """``drain_kind``'s drain, returning its rate (jobs/s) and the worker's CPU per job (us)."""
    reset()
    payloads = [{"n": i, "run": tag} for i in range(n)]
    for start in range(0, n, batch):
        handle.enqueue_many(payloads[start : start + batch])
    return drain(concurrency, n, handle.kind)


# -- pickup -----------------------------------------------------------------------------------


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


def pickups_succeeded(after_id: int, kind: str | None = None) -> int:
    """How many ``bench.pickup`` jobs (or of ``kind``) with an id above ``after_id`` have
    succeeded."""
    from bench.jobs import PICKUP_KIND

    return sql(
        "SELECT COUNT(*) FROM django_jobs_job WHERE kind = %s AND id > %s AND state = 'succeeded'",
        [kind or PICKUP_KIND, after_id],
    )[0][0]


def paced_pickups(
    n: int,
    gap: float,
    tag: str,
    on_enqueued: Callable[[Any, float], None] | None = None,
    handle: Any = None,
) -> int:
    """Warm the listening worker up, then enqueue ``n`` ``bench.pickup`` jobs ``gap`` s apart
    (paced from one start, so a slow enqueue does not push the later ones back) and wait until
    they have run. Each job carries the clock reading just before its ``enqueue`` (``at``),
    also given to ``on_enqueued(job, at)``. Returns the largest job id before the paced ones.
    The pickup figure and ``bench.pickup_trace`` both time jobs sent this way."""
    from bench.jobs import pickup

    stamp = handle or pickup
    for i in range(PICKUP_WARM_UP):
        stamp.enqueue({"warm": i, "run": tag, "at": time.time()})
        time.sleep(gap)
    wait_for(lambda: pickups_succeeded(0, stamp.kind) >= PICKUP_WARM_UP, 30, "the warm-up jobs")
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
    wait_for(lambda: pickups_succeeded(first_id, stamp.kind) >= n, 60, "the paced jobs to run")
    return first_id


def pickup(
    n: int, gap: float, concurrency: int, tag: str, handle: Any = None
) -> tuple[float, float, float]:
    """Latency from the clock reading before ``enqueue`` to the runner's start, in ms: p50, p95,
    p99 (each job's runner returns its own, ``bench.jobs.pickup``, or ``handle``'s)."""
    from bench.jobs import PICKUP_KIND

    worker = Worker("--concurrency", str(concurrency))
    try:
        worker.wait_ready()
        wait_for(listening, 30, "the worker's LISTEN connection")
        first_id = paced_pickups(n, gap, tag, handle=handle)
    finally:
        worker.stop()
    check_all_succeeded(n, since_id=first_id, kind=handle.kind if handle else PICKUP_KIND)
    latencies = [
        float(row[0]) for row in sql("SELECT result FROM django_jobs_job WHERE id > %s", [first_id])
    ]
    return percentile(latencies, 50), percentile(latencies, 95), percentile(latencies, 99)
