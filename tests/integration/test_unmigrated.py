"""On a database that was never migrated, a worker says so and exits instead of retrying
"no such table" as if the database were away, and a ``jobs`` command says what to run instead
of showing the database's traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.process


def manage(sqlite_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DATABASE_URL"))}
    env.update(DJANGO_SETTINGS_MODULE="testproject.settings", SQLITE_PATH=str(sqlite_path))
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_worker_on_a_database_never_migrated_says_to_migrate_and_exits(tmp_path: Path):
    ran = manage(tmp_path / "never-migrated.sqlite3", "runjobs", "--burst")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "django_jobs.0001_initial" in ran.stderr
    assert "Run `manage.py migrate`" in ran.stderr
    assert "ready" not in ran.stdout  # it never started working
    # (Every other process test starts runjobs on a migrated database: the check lets it be.)


def test_a_jobs_command_on_a_database_never_migrated_says_to_migrate(tmp_path: Path):
    database = tmp_path / "never-migrated.sqlite3"
    ran = manage(database, "jobs", "list")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "Run `manage.py migrate`" in ran.stderr
    assert "Traceback" not in ran.stderr
    ran = manage(database, "jobs", "list", "--json")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    error = json.loads(ran.stdout)["error"]
    assert error["code"] == "NOT_MIGRATED"
    assert "django_jobs.0001_initial" in error["message"]
