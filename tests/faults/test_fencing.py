"""A run that lost its job writes no step: the fence of a late worker, in one process.

The silent-network test shows it with real processes; here the two runs of one job (the one
whose lease ran out, and the one that re-asked it) are two contexts side by side, so every
kind of step write is checked, on SQLite and PostgreSQL. And the rescue of a job whose row a
cut-off worker's transaction still holds: passed over, never waited on (PostgreSQL).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_jobs import clock
from django_jobs.engine.durable.journal import LeaseLost
from django_jobs.engine.run.context import JobContext, LiveState
from django_jobs.models import Job, JobStep
from django_jobs.store import get_store
from testproject.jobs import three_steps
from testproject.models import Execution
from tests.conftest import claim
from tests.locks import held_open, on_another_connection

pytestmark = [pytest.mark.faults, pytest.mark.django_db]


def claimed_as(worker_id: str, now) -> JobContext:
    [job] = claim(worker_id, now=now)
    return JobContext(job, job.payload, LiveState(job))


def effect(ctx: JobContext):
    def write():
        Execution.objects.create(job_id=ctx.job.pk, label="effect", attempt=ctx.attempt)
        return {"by": ctx.job.worker_id}

    return write


def test_the_run_that_lost_its_lease_writes_no_step_and_no_effect():
    job = three_steps.enqueue({"n": "fenced"})
    now = clock.now()
    late = claimed_as("late", now)
    assert late.step.run("first", lambda: "late") == "late"
    # Its lease runs out without a heartbeat; another worker re-asks the job.
    later = now + timedelta(minutes=5)
    assert get_store().rescue(engine=None, now=later, error="lease ran out") == [(job.pk, "queued")]
    new = claimed_as("new", later)
    assert new.attempt == late.attempt + 1

    with pytest.raises(LeaseLost):
        late.step.atomic("effect", effect(late))  # refused inside its transaction
    with pytest.raises(LeaseLost):
        late.step.run("last", lambda: "late")  # a new step row
    assert not Execution.objects.filter(job_id=job.pk).exists()
    assert set(JobStep.objects.filter(job_id=job.pk).values_list("name", flat=True)) == {"first"}

    # The new run replays the first step, runs the others; the late one still cannot write.
    assert new.step.run("first", lambda: "new") == "late"
    assert new.step.atomic("effect", effect(new)) == {"by": "new"}
    with pytest.raises(LeaseLost):
        late.step.sleep("nap", "1h")
    assert new.step.run("last", lambda: "new") == "new"
    assert Execution.objects.filter(job_id=job.pk).count() == 1


def test_a_late_run_cannot_overwrite_a_step_row_the_new_run_stored():
    job = three_steps.enqueue({"n": "overwrite"})
    now = clock.now()
    late = claimed_as("late", now)

    def fails():
        raise RuntimeError("not yet")

    with pytest.raises(RuntimeError):
        late.step.run("first", fails)  # the step row stays, failed
    assert JobStep.objects.get(job_id=job.pk, name="first").state == "failed"
    Job.objects.filter(pk=job.pk).update(leased_until=now - timedelta(seconds=1))
    get_store().rescue(engine=None, now=now, error="lease ran out")
    new = claimed_as("new", now)

    # Both runs see the failed row and run the step again: only the run holding the job
    # writes; the late one's start and its result are refused.
    assert new.step.run("first", lambda: "new") == "new"
    late.step._seen.discard("first")  # a second try in the late run's code, as a loop would
    with pytest.raises(LeaseLost):
        late.step.run("first", lambda: "late")
    row = JobStep.objects.get(job_id=job.pk, name="first")
    assert (row.state, row.value, row.attempts) == ("completed", "new", 2)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks (SKIP LOCKED)")
def test_the_rescue_passes_over_a_job_another_transaction_holds_and_takes_it_after():
    # A worker cut off from the server while it recorded a job's outcome: its transaction
    # stays open there, holding the row, after the job's lease ran out. Another worker's
    # rescue must not wait on it (its keeper, and every outcome behind it, would wait too).
    held, free = three_steps.enqueue({"n": "held"}), three_steps.enqueue({"n": "free"})
    now = clock.now()
    claim("cut-off", now=now, limit=2)
    later = now + timedelta(minutes=5)

    def rescue() -> list[tuple[int, str]]:
        return get_store().rescue(engine=None, now=later, error="lease ran out")

    with held_open(lambda: list(Job.objects.select_for_update().filter(pk=held.pk))):
        assert on_another_connection(rescue) == [(free.pk, "queued")]
    assert rescue() == [(held.pk, "queued")]
