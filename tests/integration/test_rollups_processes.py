"""Two real ``runjobs`` processes on a clock the test moves (``DJANGO_JOBS_TEST_CLOCK``): the
minute their jobs ended in is closed once a worker's duty looks past it, counted once though
both workers look. SQLite (file database) and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine

from django_jobs import clock
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job, JobRollup, RollupMark
from tests.conftest import wait_until

pytestmark = [pytest.mark.process, pytest.mark.engine]

T0 = datetime(2026, 6, 1, 12, 0, 5, tzinfo=UTC)
MINUTE = T0.replace(second=0)


def test_two_workers_close_the_minute_once(spawn, tmp_path: Path):
    clock_file = tmp_path / "clock"
    clock.set_file(clock_file, T0)
    env = {clock.TEST_CLOCK_ENV: str(clock_file), "DJANGO_DEBUG": "1", "JOBS_LEASE": "2s"}
    workers = [spawn("runjobs", "--concurrency", "2", "--name", f"w{i}", env=env) for i in (1, 2)]
    for worker in workers:
        worker.wait_for_output("ready")
    with time_machine.travel(T0, tick=False):  # due at the workers' time
        jobs = [lookup("test.noop").enqueue({"n": n}) for n in range(6)]
    ids = [job.pk for job in jobs]
    output = lambda: "\n".join(w.output() for w in workers)  # noqa: E731
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, state="succeeded").count() == 6, message=output()
    )
    assert not JobRollup.objects.filter(minute=MINUTE).exists()  # the minute is not over

    clock.set_file(clock_file, MINUTE + timedelta(minutes=1, seconds=6))
    row = wait_until(
        lambda: JobRollup.objects.filter(minute=MINUTE, kind="test.noop").first(),
        message=output(),
    )
    assert (row.span, row.queue, row.succeeded, row.failed) == (60, "default", 6, 0)
    assert sum(row.runtime.values()) == 6 and sum(row.pickup.values()) == 6
    assert RollupMark.objects.get().closed_until == MINUTE + timedelta(minutes=1)
    assert JobRollup.objects.filter(minute=MINUTE, kind="test.noop").count() == 1
