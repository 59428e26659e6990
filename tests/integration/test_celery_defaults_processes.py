"""Under a real worker (``manage.py runjobs``): a second enqueue of one payload while the first
job runs is a second job with its own effect when the kind is keyed ``"call"``, as every
Celery ``delay()`` runs; keyed ``"payload"``, it returns the running job, which runs once."""

from __future__ import annotations

import pytest

from django_jobs.models import Job
from testproject.jobs import every_call, slow
from testproject.models import Execution
from tests.conftest import wait_until

pytestmark = pytest.mark.process


def running(job_id: int) -> bool:
    return Job.objects.get(pk=job_id).state == "running"


def ended(*ids: int) -> bool:
    return all(Job.objects.get(pk=i).state in ("succeeded", "failed") for i in ids)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_call_a_second_enqueue_while_the_first_runs_is_a_second_job_and_effect(
    spawn, tmp_path, processes
):
    release = tmp_path / "release"
    payload = {"change": "price=10", "until": str(release)}
    first = every_call.enqueue(payload)
    worker = spawn("runjobs", "--processes", processes, "--concurrency", "2")
    wait_until(lambda: running(first.pk), message=worker.output())
    wait_until(lambda: Execution.objects.filter(job_id=first.pk).exists())

    second = every_call.enqueue(payload)  # Celery: the same .delay() again
    assert second.pk != first.pk and not second.deduped
    wait_until(lambda: Execution.objects.filter(job_id=second.pk).exists(), message=worker.output())
    release.touch()
    wait_until(lambda: ended(first.pk, second.pk), timeout=60, message=worker.output())

    rows = Job.objects.filter(pk__in=[first.pk, second.pk])
    assert {(j.state, j.result) for j in rows} == {("succeeded", "price=10")}
    assert Execution.objects.filter(label="every_call:price=10").count() == 2  # two effects


def test_payload_a_second_enqueue_while_the_first_runs_returns_the_running_job(spawn, tmp_path):
    release = tmp_path / "release"
    payload = {"until": str(release)}
    first = slow.enqueue(payload)
    worker = spawn("runjobs", "--concurrency", "2")
    wait_until(lambda: running(first.pk), message=worker.output())

    again = slow.enqueue(payload)  # queued or running, the payload's job is live: coalesced
    assert again.pk == first.pk and again.deduped and again.state == "running"
    release.touch()
    wait_until(lambda: ended(first.pk), timeout=60, message=worker.output())
    assert Job.objects.filter(kind="test.slow").count() == 1
    assert Execution.objects.filter(job_id=first.pk, label="slow-start").count() == 1

    after = slow.enqueue(payload)  # ended: no live job holds the key, a new job
    assert after.pk != first.pk and not after.deduped
