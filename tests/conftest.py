"""Shared fixtures. The database is SQLite unless DATABASE_URL points at PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


requires_postgres = pytest.mark.skipif(
    "not os.environ.get('DATABASE_URL')", reason="needs PostgreSQL (set DATABASE_URL)"
)


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
    """A ``manage.py`` subprocess whose output is kept for assertions."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
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
        self.log.close()


@pytest.fixture
def spawn(worker_env: dict[str, str], tmp_path: Path) -> Iterator:
    procs: list[Proc] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Proc:
        proc = Proc(list(args), {**worker_env, **(env or {})}, tmp_path / f"proc{len(procs)}.log")
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.stop()


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
