"""A database that stops taking writes (a full disk, a replica promoted the wrong way round).

The job's outcome cannot be written: the worker must not report it done, must stay up, and
once writes work again the job's true outcome is recorded and the job runs again as its retry
policy says: nothing lost, nothing reported that did not happen. PostgreSQL only: the
database is made read-only for new sessions (``default_transaction_read_only``) and the
worker's sessions are ended so that it reconnects into that.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from django_jobs.events.outbox import writer
from django_jobs.models import Job, JobEventRecord
from testproject.jobs import slow
from testproject.models import Execution
from tests.conftest import end_other_sessions, on_postgres, wait_until

pytestmark = [pytest.mark.process, pytest.mark.postgres, pytest.mark.engine]


def set_read_only(on: bool) -> None:
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        if on:
            cursor.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
        else:
            cursor.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")


@pytest.fixture
def read_only() -> Iterator[None]:
    if not on_postgres():
        pytest.skip("the read-only switch is PostgreSQL's (default_transaction_read_only)")
    yield
    set_read_only(False)  # whatever happened, the next test gets a writable database


def executions(job_id: int, label: str) -> int:
    return Execution.objects.filter(job_id=job_id, label=label).count()


def test_an_outcome_that_cannot_be_written_is_not_reported_and_the_job_runs_again(
    spawn, tmp_path, read_only
):
    marker = tmp_path / "finish"
    job = slow.enqueue({"until": str(marker), "seconds": 60})
    worker = spawn("runjobs", "--concurrency", "1", "--no-scheduler")
    wait_until(lambda: executions(job.pk, "slow-start") == 1, message=worker.output())

    # Writes stop while the job runs: its last write fails, so does the record of that failed
    # attempt, again and again.
    set_read_only(True)
    assert end_other_sessions() >= 1
    marker.touch()
    wait_until(lambda: "read-only transaction" in worker.output(), message=worker.output())
    wait_until(lambda: worker.output().count("Database unavailable") >= 3)
    row = Job.objects.get(pk=job.pk)
    assert row.state == "running" and row.attempts == 1  # not reported done, nor failed
    assert executions(job.pk, "slow-end") == 0
    assert worker.popen.poll() is None  # the worker stays up

    set_read_only(False)  # its next reconnect is writable again
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=60, message=worker.output()
    )
    row = Job.objects.get(pk=job.pk)
    # The first attempt's failure was recorded once writes came back, then its retry ran.
    assert row.attempts == 2
    assert executions(job.pk, "slow-start") == 2 and executions(job.pk, "slow-end") == 1
    writer.flush()
    # The worker stores its events after the row's end, from its own writer: wait for it, then
    # count (exactly one, never a second for the attempt that could not be written).
    succeeded = JobEventRecord.objects.filter(job_id=job.pk, type="job.succeeded")
    wait_until(succeeded.exists, timeout=30, message=worker.output())
    assert succeeded.count() == 1
    assert worker.popen.poll() is None
