"""Helpers for tests: run due jobs in the calling thread, on the caller's connection.

``run_until_idle`` works inside a plain ``django.test.TestCase``: it claims and records on the
test's own connection, so jobs enqueued in the test's transaction are visible to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import clock
from .engine.maintenance import end_expired_jobs
from .engine.run.executor import Executor
from .engine.run.runner import run_next
from .engine.schedules.scheduler import tick
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
    ended, in the order they ran (a job that ran twice appears twice). Caps, rates and paused
    queues hold as for a worker: a job they do not allow now is not due. Jobs whose
    ``expires_at`` passed before they started end ``cancelled`` ("expired") first, as a worker
    ends them.
    """
    store = get_store()
    end_expired_jobs()  # as a worker does: a job whose expires_at passed ends, unrun
    executor = Executor(INLINE_WORKER, inline=True)
    ran: list[Job] = []
    while max_jobs is None or len(ran) < max_jobs:
        job = run_next(store, executor, engine=engine, queues=queues)
        if job is None:
            break
        ran.append(job)
    return ran


def fire_schedules() -> list[Job]:
    """Sync declared schedules and fire the due occurrences once; return the jobs."""
    return tick(clock.now())
