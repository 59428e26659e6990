"""Workers behind PgBouncer, in session mode and in transaction mode (docs/scaling.md).

Each test starts its own ``pgbouncer`` on a free port of 127.0.0.1, in front of the test
database's server, and points a real ``manage.py runjobs`` at it (``DATABASE_URL`` to the
pooler). The test process itself talks to PostgreSQL directly, as a web process beside the
pool would, and waits on the worker's rows, never on time.

- Session mode: a client keeps its server connection, so everything works: enqueue through
  the pool, drains, the NOTIFY wake-up of an idle worker.
- Transaction mode: a server connection serves whichever client has a transaction open. A
  LISTEN stays on the server connection it ran on, not with the client, so the worker's
  wake-ups do not reach it and jobs are picked up by the poll (``JOBS["POLL_INTERVAL"]``).
  The scheduler's leader lock and the events' ordering lock are transaction-level advisory
  locks, which transaction mode keeps. The engine's prepared statements outlive the
  transaction on the server connection; PgBouncer before 1.21 does not track them, so
  ``DISABLE_SERVER_SIDE_CURSORS`` must be set and the engine then prepares nothing. A web
  process's events relay reads the rows on a short timer as well as on NOTIFY: live events
  still arrive.

Skipped when ``pgbouncer`` is not installed (``apt-get install pgbouncer``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from django_jobs.models import Job
from testproject.jobs import count_to_100, record, with_steps
from testproject.models import Execution
from tests.conftest import (
    SSEClient,
    free_port,
    requires_postgres,
    session_cookie,
    someone_listens,
    wait_until,
)
from tests.integration.test_events_live import check_counted_to_100, ended, row_ids

pytestmark = [pytest.mark.process, pytest.mark.pgbouncer, requires_postgres]


def pgbouncer_binary() -> str | None:
    # Debian installs it in /usr/sbin, which a non-root PATH often lacks.
    found = shutil.which("pgbouncer")
    if found:
        return found
    fallback = Path("/usr/sbin/pgbouncer")
    return str(fallback) if fallback.exists() else None


class PgBouncer:
    """A ``pgbouncer`` process in front of the test database's server, on a free port."""

    def __init__(self, directory: Path, *, mode: str, pool_size: int) -> None:
        binary = pgbouncer_binary()
        assert binary is not None
        settings = connection.settings_dict
        self.port = free_port()
        self.user = settings["USER"]
        self.database = settings["NAME"]
        config = directory / f"pgbouncer-{mode}.ini"
        lines = [
            "[databases]",
            # auth_type "any": PgBouncer takes any client and logs in as this user.
            f"* = host={settings['HOST']} port={settings['PORT']} user={self.user}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = any",
            f"pool_mode = {mode}",
            f"default_pool_size = {pool_size}",
            "max_client_conn = 200",
            # Startup parameters psycopg and Django may send that PgBouncer would refuse.
            "ignore_startup_parameters = extra_float_digits,options",
        ]
        if os.geteuid() == 0:
            # PgBouncer refuses to run as root; it reads its files first, then drops to this.
            lines.append("user = nobody")
        config.write_text("\n".join(lines) + "\n")
        self.log_path = directory / f"pgbouncer-{mode}.log"
        self.log = open(self.log_path, "wb")  # closed in stop()
        self.popen = subprocess.Popen(
            [binary, str(config)], stdout=self.log, stderr=subprocess.STDOUT
        )
        wait_until(self._accepting, timeout=30, message="pgbouncer did not start someone_listens")

    def _accepting(self) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"pgbouncer exited early:\n{self.output()}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def url(self) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def connect(self) -> psycopg.Connection:
        """A client connection through the pool, in autocommit, as the engine's LISTEN uses."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            dbname=self.database,
            autocommit=True,
        )

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        self.log.close()


@pytest.fixture
def pgbouncer(tmp_path: Path, transactional_db: None) -> Iterator:
    """``pgbouncer(mode, pool_size=4)`` starts a pooler; all are stopped after the test."""
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    started: list[PgBouncer] = []

    def start(mode: str, pool_size: int = 4) -> PgBouncer:
        bouncer = PgBouncer(tmp_path, mode=mode, pool_size=pool_size)
        started.append(bouncer)
        return bouncer

    yield start
    for bouncer in started:
        bouncer.stop()


def states() -> dict[str, int]:
    return dict(Counter(Job.objects.values_list("state", flat=True)))


def ran_once(jobs: list[Job]) -> bool:
    runs = Counter(Execution.objects.values_list("job_id", flat=True))
    return all(runs[job.pk] == 1 for job in jobs) and sum(runs.values()) == len(jobs)


def wait_for(predicate, what: str, *procs, timeout: float = 30) -> None:
    try:
        wait_until(predicate, timeout=timeout)
    except AssertionError:
        outputs = "\n".join(proc.output() for proc in procs)
        raise AssertionError(f"{what} (waited {timeout}s):\n{outputs}") from None


def others_idle() -> bool:
    """Every other connection to the test database is idle: no claim is under way."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state <> 'idle' AND backend_type = 'client backend'"
        )
        return cursor.fetchone()[0] == 0


# -- session mode: everything works ----------------------------------------------------------


def test_session_mode_enqueue_drain_and_notify_wake_ups_work(pgbouncer, spawn):
    # In session mode each client keeps a server connection until it disconnects: the pool
    # must hold all of a worker's (its claim loop, LISTEN, heartbeat and one per executor
    # thread); with fewer, the extra ones wait for a server connection that never frees.
    bouncer = pgbouncer("session", pool_size=20)
    through = {"DATABASE_URL": bouncer.url()}

    # Enqueue through the pool, with the CLI (its own process, its own pooled connection).
    enqueued = spawn("jobs", "enqueue", "test.record", "--payload", '{"n": "cli"}', env=through)
    assert enqueued.wait() == 0, enqueued.output()
    # A burst worker through the pool drains it and others, each once.
    jobs = [
        Job.objects.get(kind="test.record"),
        *record.enqueue_many([{"n": i} for i in range(20)]),
    ]
    burst = spawn("runjobs", "--burst", "--concurrency", "2", env=through)
    assert burst.wait() == 0, burst.output()
    assert states() == {"succeeded": 21}
    assert ran_once(jobs)

    # An idle worker whose poll is an hour away: only its LISTEN can wake it, each time.
    worker = spawn("runjobs", "--concurrency", "1", env={**through, "JOBS_POLL_INTERVAL": "1h"})
    worker.wait_for_output("ready")
    wait_for(someone_listens, "the worker never LISTENed through the pool", worker)
    for n in range(3):
        wait_for(others_idle, "the worker's connections stay busy", worker)
        job = record.enqueue({"n": f"woken {n}"})  # commits and notifies, directly
        jobs.append(job)
        wait_for(
            lambda job=job: Job.objects.get(pk=job.pk).state == "succeeded",
            "the idle worker was not woken through the pool",
            worker,
        )
    assert ran_once(jobs)
    assert "prepared statement" not in worker.output()


# -- transaction mode: LISTEN does not follow the client; polling does the work ---------------


def test_transaction_mode_a_listen_stays_on_the_server_connection_not_the_client(pgbouncer):
    # One server connection for the pool: every client's transaction runs on it in turn.
    bouncer = pgbouncer("transaction", pool_size=1)
    listener = bouncer.connect()
    other = bouncer.connect()
    try:
        listener.execute("LISTEN django_jobs")
        # The listener's transaction ended; its server connection now serves another client,
        # and the LISTEN is that connection's, so it is the other client's now.
        query = "SELECT array_agg(c) FROM pg_listening_channels() AS c"
        assert other.execute(query).fetchone() == (["django_jobs"],)
    finally:
        listener.close()
        other.close()


@pytest.mark.parametrize("setting", ["disable_server_side_cursors", "prepare_threshold_none"])
def test_transaction_mode_with_the_documented_setting_jobs_get_done_by_polling(
    pgbouncer, spawn, setting
):
    # One server connection, shared by the worker's connections: what it leaves on it, its
    # next transaction (or another client's) finds there.
    bouncer = pgbouncer("transaction", pool_size=1)
    through = {
        "DATABASE_URL": bouncer.url(),
        # DISABLE_SERVER_SIDE_CURSORS = True, or OPTIONS = {"prepare_threshold": None}.
        "DATABASE_TRANSACTION_POOL": setting,
        # The wake-up does not reach the worker (above): the poll picks the jobs up.
        "JOBS_POLL_INTERVAL": "0.2s",
    }
    worker = spawn("runjobs", "--concurrency", "2", env=through)
    worker.wait_for_output("ready")
    jobs = record.enqueue_many([{"n": i} for i in range(30)])
    wait_for(lambda: states() == {"succeeded": 30}, "the jobs were not done", worker)
    late = record.enqueue({"n": "late"})
    wait_for(lambda: states() == {"succeeded": 31}, "a later job was not picked up", worker)
    assert ran_once([*jobs, late])
    # The engine prepared nothing on the shared server connection, and no statement failed.
    probe = bouncer.connect()
    try:
        (left,) = probe.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    finally:
        probe.close()
    assert left == 0
    output = worker.output()
    assert "prepared statement" not in output and "Traceback" not in output, output


def test_transaction_mode_without_the_setting_prepared_statements_collide_and_say_so(
    pgbouncer, spawn
):
    # Django's default OPTIONS: the engine prepares its hot statements on each connection.
    # Through one shared server connection the worker's second connection to prepare finds
    # the first one's "_pg3_0" there: every attempt fails the same way, reconnecting or not.
    # Two connections of the worker prepare: the keeper's (outcomes and live events) and an
    # executor thread's (the durable steps' inserts).
    bouncer = pgbouncer("transaction", pool_size=1)
    through = {"DATABASE_URL": bouncer.url(), "DATABASE_TRANSACTION_POOL": "django_defaults"}
    worker = spawn("runjobs", "--concurrency", "2", env=through)
    worker.wait_for_output("ready")
    record.enqueue_many([{"n": i} for i in range(10)])
    with_steps.enqueue_many([{"n": i} for i in range(10)])
    worker.wait_for_output("already exists")
    worker.wait_for_output("set DISABLE_SERVER_SIDE_CURSORS = True on the database")
    assert 'prepared statement "_pg3_' in worker.output()
    assert worker.popen.poll() is None  # it keeps retrying; it never exits on its own


def test_transaction_mode_live_events_reach_a_browser_through_the_relays_poll(
    pgbouncer, spawn, asgi_server, django_user_model
):
    # A web process and a worker both behind the transaction pool: the relay's LISTEN does not
    # follow it either, but the relay reads the rows on a short timer too, so a browser still
    # gets every event, in order.
    bouncer = pgbouncer("transaction", pool_size=2)
    through = {
        "DATABASE_URL": bouncer.url(),
        "DATABASE_TRANSACTION_POOL": "disable_server_side_cursors",
        "JOBS_POLL_INTERVAL": "0.2s",
    }
    worker = spawn("runjobs", "--concurrency", "2", env=through)
    server = asgi_server(env=through)
    alice = django_user_model.objects.create_user("alice")
    sse = SSEClient(server.base, cookie=session_cookie(alice))
    try:
        assert sse.status == 200
        assert sse.next()["event"] == "stream-open"
        job = count_to_100.as_user(alice, {"pause": 0.05, "test": "through the pool"})
        streamed = sse.job_events(until=ended(job))
    finally:
        sse.close()
    check_counted_to_100(streamed, at_least=3)
    assert [e["_id"] for e in streamed] == [f"jobs-user-{alice.pk}:{i}" for i in row_ids(job)]
    for proc in (worker, server):
        assert "prepared statement" not in proc.output(), proc.output()
