"""The database goes away under a running worker: it reconnects and loses nothing."""

from __future__ import annotations

import pytest
from django.db import connection

from django_jobs.models import Job
from testproject.jobs import record
from tests.conftest import end_other_sessions, wait_until

pytestmark = [pytest.mark.process, pytest.mark.engine]


def test_worker_survives_its_connections_being_killed(spawn):
    if connection.vendor != "postgresql":
        pytest.skip("terminating server connections needs PostgreSQL")
    first = record.enqueue_many([{"n": i} for i in range(20)])
    worker = spawn("runjobs", "--concurrency", "2")
    wait_until(lambda: Job.objects.filter(state="succeeded").count() == 20, message=worker.output())
    assert end_other_sessions() >= 1  # the worker's claim, keeper and LISTEN connections
    second = record.enqueue_many([{"n": i} for i in range(20, 60)])
    ids = [j.pk for j in first + second]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, state="succeeded").count() == 60,
        timeout=60,
        message=worker.output(),
    )
    assert worker.popen.poll() is None  # still running: it reconnected instead of crashing
    assert Job.objects.exclude(state="succeeded").count() == 0
