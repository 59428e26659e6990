"""Helpers for tests: run due jobs in the calling thread, on the caller's connection.

``run_until_idle`` works inside a plain ``django.test.TestCase``: it claims and records on the
test's own connection, so jobs enqueued in the test's transaction are visible to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import clock
from .conf import jobs_settings
from .engine.context import LiveState
from .engine.events import STATE_EVENTS, publish
from .engine.executor import Executor
from .engine.limits import claim_within_limits
from .store import get_store

if TYPE_CHECKING:
    from .models import Job

INLINE_WORKER = "inline"


def run_until_idle(
    engine: str | None = None,
    queues: list[str] | None = None,
    max_jobs: int | None = None,
) -> list[Job]:
    """Run due jobs (all engines when ``engine`` is None) until none is due now; return them.

    A retry that is due at the current clock runs in the same call. Jobs come back as they
    ended, in the order they ran (a job that ran twice appears twice).
    """
    store = get_store()
    executor = Executor(INLINE_WORKER)
    lease = jobs_settings.lease
    ran: list[Job] = []
    while max_jobs is None or len(ran) < max_jobs:
        now = clock.now()
        claimed = claim_within_limits(
            store,
            engine=engine,
            worker_id=INLINE_WORKER,
            limit=1,
            now=now,
            leased_until=now + lease,
            queues=queues,
        )
        if not claimed:
            break
        job = claimed[0]
        publish("job.started", job)
        outcome = executor.run(job, LiveState(job))
        store.record([outcome])
        job.refresh_from_db(using=store.alias)
        publish(STATE_EVENTS[job.state], job)
        ran.append(job)
    return ran


def fire_schedules() -> list[Job]:
    """Sync declared schedules and fire the due occurrences once; return the jobs."""
    from .engine.scheduler import tick

    return tick(clock.now())
