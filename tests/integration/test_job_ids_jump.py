"""What docs/getting-started.md says of job ids: on PostgreSQL each process draws ids ahead
(``store.postgres.JobIds``), so three ``manage.py jobs enqueue`` runs make jobs 1, 10 and 19;
on SQLite the insert draws them, and they follow each other."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest
from django.db import connection

from django_jobs.store.postgres import JobIds
from tests.conftest import ROOT

pytestmark = [pytest.mark.process]


def test_each_process_enqueue_takes_the_next_ids_ahead(worker_env) -> None:
    ids = []
    for n in range(3):
        payload = ["--payload", json.dumps({"n": n})]
        done = subprocess.run(
            [sys.executable, "manage.py", "jobs", "enqueue", "test.noop", "--json", *payload],
            cwd=ROOT,
            env=worker_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["id"])
    step = 1 + JobIds.MIN_AHEAD if connection.vendor == "postgresql" else 1
    assert [b - a for a, b in itertools.pairwise(ids)] == [step, step]
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert "jobs 1,\n10 and 19" in page and 1 + 2 * (1 + JobIds.MIN_AHEAD) == 19
