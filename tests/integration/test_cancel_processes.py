"""Cancelling a running job: a real ``manage.py runjobs`` process, PostgreSQL and SQLite.

The cancel reaches the worker within about a second (PostgreSQL: a NOTIFY on the worker's own
channel; SQLite: the worker's poll of ``cancel_requested``), not at its next heartbeat (a
third of the 30 s lease here), and the job ends ``cancelled``. The tests wait on the worker
process (``wait_until``) and time what they wait for; they never move the clock.
"""

from __future__ import annotations

import time

import pytest

from django_jobs.models import Job
from testproject.jobs import until_cancelled
from testproject.models import Execution
from tests.conftest import on_postgres, someone_listens, wait_until

pytestmark = [pytest.mark.process, pytest.mark.engine]

#: The lease of the worker (its heartbeat is a third of it): far longer than a cancel may take.
LEASE = {"JOBS_LEASE": "30s"}


def started(job: Job, label: str = "until-cancelled-start") -> bool:
    return Execution.objects.filter(job_id=job.pk, label=label).exists()


def state_of(job: Job) -> str:
    job.refresh_from_db()
    return job.state


@pytest.mark.parametrize("poll", [None, "5s"], ids=["default-poll", "slow-poll"])
def test_cancel_of_a_running_job_ends_it_cancelled_within_two_seconds(
    spawn, api_users, api_client, poll
):
    # A slow poll: on SQLite the cancels are still read at least every second.
    env = {**LEASE, **({"JOBS_POLL_INTERVAL": poll} if poll else {})}
    worker = spawn("runjobs", "--concurrency", "2", env=env)
    worker.wait_for_output("ready")
    if on_postgres():
        wait_until(someone_listens, message="the worker never LISTENed")
    job = until_cancelled.as_user(api_users.member, {"seconds": 60})
    wait_until(lambda: started(job), message=f"the job never started:\n{worker.output()}")
    assert state_of(job) == "running"

    response = api_client(api_users.member).post(f"/api/jobs/{job.pk}/cancel/", {}, format="json")
    answered = time.monotonic()

    assert response.status_code == 200, response.content
    assert response.json()["state"] == "running"
    assert response.json()["cancel_requested"] is True
    # From now until it ends, every read of the job says so (it may have ended already).
    detail = api_client(api_users.member).get(f"/api/jobs/{job.pk}/").json()
    assert detail["cancel_requested"] is (detail["state"] == "running"), detail
    wait_until(
        lambda: state_of(job) != "running",
        timeout=10,
        message=f"the job kept running:\n{worker.output()}",
    )
    took = time.monotonic() - answered
    assert state_of(job) == "cancelled", worker.output()
    assert took < 2.0, f"the cancel took {took:.2f}s to end the job"
    assert started(job, "until-cancelled-saw-cancel")  # its runner saw ctx.cancelled
    ended = api_client(api_users.member).get(f"/api/jobs/{job.pk}/").json()
    assert ended["state"] == "cancelled"
    assert ended["cancel_requested"] is False
    assert ended["result"] == {"stopped": "cancelled"}  # what it returned is kept
    job.refresh_from_db()
    assert job.cancel_requested is False  # the column too: the request ended with the job


def test_a_job_claimed_ahead_of_a_long_one_is_handed_back_and_its_cancel_ends_it_unstarted(
    spawn,
):
    # One slot, two jobs due: the claim takes both, the second claimed ahead (prefetched). The
    # first runs long, so the worker hands the second back (no job held hostage) unstarted.
    first = until_cancelled.enqueue({"seconds": 60, "n": 1})
    second = until_cancelled.enqueue({"seconds": 60, "n": 2})
    worker = spawn("runjobs", "--concurrency", "1", env=LEASE)
    wait_until(lambda: started(first), message=f"the job never started:\n{worker.output()}")
    wait_until(
        lambda: (
            "handed back 1 job(s) claimed ahead" in worker.output()
            or (state_of(second) == "queued" and Job.objects.get(pk=second.pk).attempts == 0)
        ),
        timeout=10,
        message=f"the second job stayed held behind the first:\n{worker.output()}",
    )
    assert state_of(second) == "queued"

    from django_jobs import cancel

    cancel(second.pk)
    cancel(first.pk)

    wait_until(
        lambda: state_of(first) == "cancelled" and state_of(second) == "cancelled",
        timeout=10,
        message=f"the jobs did not end cancelled:\n{worker.output()}",
    )
    assert not started(second)  # its runner never ran
    assert Job.objects.get(pk=second.pk).cancel_requested is False
