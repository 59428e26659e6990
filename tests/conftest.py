"""Shared fixtures. The database is SQLite unless DATABASE_URL points at PostgreSQL."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.db import connection

if TYPE_CHECKING:
    from django_jobs.store import Claim

ROOT = Path(__file__).resolve().parent.parent


def claim_request(
    worker_id: str = "w",
    *,
    limit: int = 1,
    engine: str | None = "default",
    now: datetime | None = None,
) -> Claim:
    """A ``Claim`` of up to ``limit`` due jobs for ``worker_id``, leased for 30 s from
    ``now`` (the jobs' clock by default), as a worker's claim loop makes it."""
    from django_jobs import clock
    from django_jobs.store import Claim

    now = now or clock.now()
    return Claim(
        engine=engine,
        worker_id=worker_id,
        limit=limit,
        now=now,
        leased_until=now + timedelta(seconds=30),
    )


def claim(worker_id: str = "w", **request: Any) -> list[Any]:
    """Claim straight from the store (``claim_request``'s arguments)."""
    from django_jobs.store import get_store

    return get_store().claim(claim_request(worker_id, **request))


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


def analyze_as_autovacuum_would(*models: Any) -> None:
    """``ANALYZE`` the models' tables (PostgreSQL), as a server's autovacuum would after a
    large change; the test server runs without it. It counts the test transaction's own rows,
    and it writes the statistics in place: a rollback keeps them for the tests after."""
    if on_postgres():
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {', '.join(m._meta.db_table for m in models)}")


requires_postgres = pytest.mark.skipif(
    "not os.environ.get('DATABASE_URL')", reason="needs PostgreSQL (set DATABASE_URL)"
)


#: The flush after a transactional test deletes the rows of a PostgreSQL test database whose
#: tables (each with its indexes and TOAST) are all below this size; else it truncates them.
FLUSH_BY_DELETE_BELOW = 1 << 20


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete_on_postgres() -> Iterator[None]:
    """The flush that ends each transactional test (``transactional_db``,
    ``TransactionTestCase``) empties small tables with ``DELETE`` on PostgreSQL, in the one
    transaction Django's flush runs in (foreign keys are checked at its commit).

    Django's flush is one ``TRUNCATE`` of every table: a new file for each table and index,
    about 150 ms on a quiet machine and several times that with the other environments of
    .ci/run beside it, where a ``DELETE`` of a few rows takes 2 ms. The tables end empty
    either way, and neither resets a sequence. The dead rows a ``DELETE`` leaves (the test
    server runs without autovacuum) are bounded: once any table has grown past
    ``FLUSH_BY_DELETE_BELOW`` (a large test's rows, or the dead rows of many tests), the
    flush is Django's ``TRUNCATE``, which gives every table a new empty file. Flushes that
    reset sequences or cascade (``available_apps``) are Django's as well."""
    if connection.vendor != "postgresql":
        yield
        return
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if tables and not reset_sequences and not allow_cascade:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT coalesce(max(pg_total_relation_size(to_regclass(quote_ident(t)))), 0)"
                    " FROM unnest(%s::text[]) AS t",
                    [list(tables)],
                )
                if cursor.fetchone()[0] < FLUSH_BY_DELETE_BELOW:
                    return [f"DELETE FROM {self.quote_name(table)};" for table in tables]
        return truncate(
            self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
    try:
        yield
    finally:
        DatabaseOperations.sql_flush = truncate  # type: ignore[method-assign]


@pytest.fixture
def worker_env(transactional_db: None) -> dict[str, str]:
    """Environment for subprocesses that must see the test database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    env["PYTHONUNBUFFERED"] = "1"
    name = connection.settings_dict["NAME"]
    if connection.vendor == "postgresql":
        settings = connection.settings_dict
        env["DATABASE_URL"] = (
            f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{name}"
        )
    else:
        if str(name).startswith("file:") or name == ":memory:":
            pytest.skip("process tests on SQLite need a file database (SQLITE_TEST_PATH)")
        env["SQLITE_PATH"] = str(name)
    return env


class Proc:
    """A ``manage.py`` subprocess (or ``python -m MODULE`` ones) whose output is kept."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        log: Path,
        *,
        module: str | None = None,
        prefix: list[str] | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.log_path = log
        self.log = open(log, "wb")  # closed in stop()
        program = ["-m", module] if module else [str(ROOT / "manage.py")]
        self.popen = subprocess.Popen(
            [*(prefix or []), sys.executable, *program, *args],
            cwd=cwd,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            # A group of its own: stop() ends the worker processes a runjobs supervises too.
            start_new_session=True,
        )

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.popen.poll() is not None:
                raise AssertionError(f"process exited early:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not seen in:\n{self.output()}")
            time.sleep(0.02)

    def wait(self, timeout: float = 60) -> int:
        return self.popen.wait(timeout=timeout)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # what it started, if any lives on
        self.log.close()


@pytest.fixture
def spawn(worker_env: dict[str, str], tmp_path: Path) -> Iterator:
    procs: list[Proc] = []

    def start(
        *args: str,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        cwd: Path = ROOT,
    ) -> Proc:
        """``prefix``: a command to run it under (``ip netns exec NAME``); ``cwd``: the
        directory it runs in (``runjobs --reload`` watches the Python files under it)."""
        proc = Proc(
            list(args),
            {**worker_env, **(env or {})},
            tmp_path / f"proc{len(procs)}.log",
            prefix=prefix,
            cwd=cwd,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.stop()


def end_other_sessions() -> int:
    """End every server connection to the test database but this process's own (PostgreSQL):
    the database going away, as far as the other processes can tell."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def someone_listens() -> bool:
    """A server connection of the test database sits in LISTEN (a worker's, through a pool or
    not), idle (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN %%' AND state = 'idle'"
        )
        return cursor.fetchone()[0] > 0


@contextlib.contextmanager
def exclusive(resource: str) -> Iterator[None]:
    """Hold ``resource`` against the other test runs of this machine until the block ends.

    `.ci/run` runs its test environments side by side. A test that stops a shared server (the
    local Redis) or takes fixed addresses (the network namespaces' 10.213.0.0/16) would break
    the same test of another environment running at that moment, so such tests take a lock
    file named after the resource; everything else runs freely side by side.
    """
    path = Path(tempfile.gettempdir()) / f"django-jobs-tests-{resource}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wait_until(predicate, timeout: float = 30, interval: float = 0.02, message: str = ""):
    """Poll ``predicate`` until it is truthy: waiting on another process, not on time."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message or f"condition not met within {timeout}s")
        time.sleep(interval)


# --- REST API: users of each role and a client signed in as one of them ---------------------


@pytest.fixture
def api_users(db: None, django_user_model, settings):
    """member, other (another member), operator (operate_jobs), superuser, staff (no perm)."""
    from types import SimpleNamespace

    from django.contrib.auth.models import Permission

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast

    operate = Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    make = django_user_model.objects.create_user
    users = SimpleNamespace(
        member=make("member", password="pw-member"),
        other=make("other", password="pw-other"),
        operator=make("operator", password="pw-operator"),
        superuser=django_user_model.objects.create_superuser("root", password="pw-root"),
        staff=make("staff", password="pw-staff", is_staff=True),
    )
    users.operator.user_permissions.add(operate)
    return users


@pytest.fixture
def api_client():
    """``api_client(user)``: a DRF test client signed in (by session) as ``user``, or anonymous."""
    from rest_framework.test import APIClient

    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make


# --- live events: a real ASGI server (daphne), SSE and WebSocket clients, session cookies ------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AsgiServer(Proc):
    """``daphne testproject.asgi:application`` (or ``app``) on a free port, with the test
    database."""

    def __init__(
        self, env: dict[str, str], log: Path, app: str = "testproject.asgi:application"
    ) -> None:
        import socket

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ws_base = f"ws://127.0.0.1:{self.port}"
        args = ["-b", "127.0.0.1", "-p", str(self.port), app]
        super().__init__(args, env, log, module="daphne")

        def accepting() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"daphne exited early:\n{self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                return False
            return True

        wait_until(accepting, timeout=30, message="daphne did not start listening")


@pytest.fixture
def asgi_server(worker_env: dict[str, str], tmp_path: Path) -> Iterator:
    """``asgi_server(env=None, app=...)`` starts a daphne process; all are stopped after the
    test."""
    servers: list[AsgiServer] = []

    def start(
        env: dict[str, str] | None = None, app: str = "testproject.asgi:application"
    ) -> AsgiServer:
        log = tmp_path / f"daphne{len(servers)}.log"
        server = AsgiServer({**worker_env, **(env or {})}, log, app)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def session_cookie(user) -> str:
    """A committed session of ``user``: the value of the ``sessionid`` cookie."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


class SSEClient:
    """A Server-Sent Events client reading ``path`` on a thread; events go to a queue."""

    def __init__(
        self,
        base: str,
        *,
        cookie: str | None = None,
        last_event_id: str | None = None,
        path: str = "/api/jobs/events/",
    ) -> None:
        import http.client
        import queue
        import threading
        from urllib.parse import urlparse

        url = urlparse(base)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        headers = {"Accept": "text/event-stream"}
        if cookie:
            headers["Cookie"] = f"sessionid={cookie}"
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", path, headers=headers)
        self.sock = self.conn.sock
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.events: queue.Queue = queue.Queue()
        self.closed = False
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        fields: dict[str, str] = {}
        data: list[str] = []
        try:
            while True:
                raw = self.response.readline()
                if not raw:
                    break
                line = raw.decode().rstrip("\r\n")
                if not line:
                    if data or fields:
                        self.events.put({**fields, "data": "\n".join(data)})
                    fields, data = {}, []
                elif line.startswith(":"):
                    continue
                else:
                    name, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "data":
                        data.append(value)
                    else:
                        fields[name] = value
        except Exception:  # closed under it (IncompleteRead, OSError...): the stream ended
            pass
        finally:
            self.events.put(None)

    def next(self, timeout: float = 30) -> dict:
        """The next event (``event``, ``id``, ``data``); fails on timeout or end of stream."""
        import queue

        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no SSE event within {timeout}s") from None
        if event is None:
            raise AssertionError("the SSE stream ended")
        return event

    def job_events(self, until, timeout: float = 30) -> list[dict]:
        """Job events (each ``data`` parsed, with ``_id``) up to the first matching ``until``."""
        import json
        import time

        deadline = time.monotonic() + timeout
        seen: list[dict] = []
        while True:
            event = self.next(timeout=max(deadline - time.monotonic(), 0.01))
            if not event.get("event", "").startswith("job."):
                continue
            data = json.loads(event["data"])
            data["_id"] = event.get("id")
            data["_text"] = event["data"]
            seen.append(data)
            if until(data):
                return seen

    def close(self) -> None:
        import socket

        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


#: Set by whoever runs the tests without the Debian packages .ci/run would install as root
#: (chromium, chromium-driver, pgbouncer): the tests that need them skip, even where the
#: packages happen to be installed.
NO_APT_MARKERS = ("browser", "pgbouncer")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CI_NO_APT") != "1":
        return
    skip = pytest.mark.skip(
        reason="CI_NO_APT=1: the browser and PgBouncer tests are off (unset it to run them)"
    )
    for item in items:
        if any(item.get_closest_marker(name) for name in NO_APT_MARKERS):
            item.add_marker(skip)
