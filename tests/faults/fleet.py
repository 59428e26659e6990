"""What the fleet fault loops share: the jobs they drain and what they check at the end."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection
from django.db.models import Count, F

from django_jobs.models import Job, JobStep
from testproject.jobs import three_steps
from testproject.models import Execution

# Short leases, so that the jobs of a killed or cut-off worker come back within seconds.
LEASE = "2s"


def require_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("several worker processes and server-side faults need PostgreSQL")


def enqueue_three_steps(count: int, *, pause: float, batch: int = 500) -> list[int]:
    ids: list[int] = []
    for start in range(0, count, batch):
        payloads = [{"n": n, "pause": pause} for n in range(start, min(start + batch, count))]
        ids.extend(job.pk for job in three_steps.enqueue_many(payloads))
    return ids


def succeeded(ids: list[int]) -> int:
    return Job.objects.filter(pk__in=ids, state="succeeded").count()


def states(ids: list[int]) -> dict[str, int]:
    return dict(Counter(Job.objects.filter(pk__in=ids).values_list("state", flat=True)))


def within(predicate: Callable[[], bool], seconds: float) -> bool:
    """Poll ``predicate`` for up to ``seconds``; whether it came true (no failure if not)."""
    deadline = time.monotonic() + seconds
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def assert_exactly_once(ids: list[int]) -> dict[str, int]:
    """Nothing lost, nothing left running, each atomic effect once, attempts within bounds.

    Returns the figures of the run: jobs, attempts beyond the first, duplicates.
    """
    assert states(ids) == {"succeeded": len(ids)}, "lost or unfinished jobs"
    effects = Counter(
        dict(
            Execution.objects.filter(job_id__in=ids, label="effect")
            .values("job_id")
            .annotate(n=Count("id"))
            .values_list("job_id", "n")
        )
    )
    duplicates = {job_id: n for job_id, n in effects.items() if n != 1}
    assert not duplicates, f"atomic effects counted more than once: {duplicates}"
    assert set(effects) == set(ids), "jobs whose atomic effect is missing"
    steps = JobStep.objects.filter(job_id__in=ids)
    assert steps.filter(state="completed").count() == 3 * len(ids)
    assert steps.exclude(state="completed").count() == 0
    over = Job.objects.filter(pk__in=ids, attempts__gt=F("max_attempts")).count()
    assert over == 0, "jobs that ran more attempts than their max_attempts"
    extra = sum(a - 1 for a in Job.objects.filter(pk__in=ids).values_list("attempts", flat=True))
    return {"jobs": len(ids), "retried_attempts": extra, "duplicates": 0, "lost": 0}
