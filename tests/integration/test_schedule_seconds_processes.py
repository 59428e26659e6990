"""A real ``runjobs`` on a clock the test moves (``DJANGO_JOBS_TEST_CLOCK``): a 20-second
interval schedule fires each occurrence once, and a job whose ``expires_at`` passed before it
was due is never run and ends ``cancelled`` ("expired") with its ``job.cancelled`` event.
SQLite (file database) and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine

from django_jobs import clock
from django_jobs.engine import schedules
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job, JobEventRecord
from tests.conftest import wait_until

pytestmark = [pytest.mark.process, pytest.mark.engine]

T0 = datetime(2026, 6, 1, 12, 0, 5, tzinfo=UTC)


def _state(key: str) -> str | None:
    row = Job.objects.filter(idempotency_key=key).first()
    return row.state if row else None


def test_a_worker_fires_every_20s_and_never_runs_an_expired_job(spawn, tmp_path: Path):
    clock_file = tmp_path / "clock"
    clock.set_file(clock_file, T0)
    with time_machine.travel(T0, tick=False):
        schedules.create(name="pulse", every="20s", kind="test.noop", payload={})
        late = lookup("test.noop").enqueue({"late": 1}, delay="30s", expires="5s")
    assert late.expires_at == T0 + timedelta(seconds=35)
    env = {
        clock.TEST_CLOCK_ENV: str(clock_file),
        "JOBS_LOG_LEVEL": "INFO",
        "DJANGO_DEBUG": "1",
        "JOBS_LEASE": "2s",
    }
    worker = spawn("runjobs", "--concurrency", "2", env=env)
    worker.wait_for_output("ready")

    def moved(to: datetime) -> None:
        clock.set_file(clock_file, to)

    first = "schedule:pulse:2026-06-01T12:00:20+00:00"
    second = "schedule:pulse:2026-06-01T12:00:40+00:00"
    moved(T0 + timedelta(seconds=15))  # 12:00:20
    wait_until(lambda: _state(first) == "succeeded", message=worker.output())
    assert _state(second) is None
    # Past 12:00:40 (the next occurrence) and past the late job's expiry (12:00:40), which
    # was due at 12:00:35: the worker never saw it due before it expired.
    moved(T0 + timedelta(seconds=40))  # 12:00:45
    wait_until(lambda: _state(second) == "succeeded", message=worker.output())
    wait_until(lambda: Job.objects.get(pk=late.pk).state == "cancelled", message=worker.output())
    row = Job.objects.get(pk=late.pk)
    assert (row.error, row.attempts, row.started_at) == ("expired", 0, None)
    wait_until(
        lambda: JobEventRecord.objects.filter(job_id=late.pk, type="job.cancelled").exists(),
        message=worker.output(),
    )
    keys = set(
        Job.objects.filter(idempotency_key__startswith="schedule:pulse:").values_list(
            "idempotency_key", flat=True
        )
    )
    assert keys == {first, second}
