"""Run one due job in the calling thread: claim it within the limits, execute, record, publish.

``run_until_idle`` (tests) and ``manage.py jobs drain`` call ``run_next`` in a loop; the worker
(``engine.worker``) does the same stages in batches across its threads. So every way of running
jobs claims through ``claim_within_limits`` (CAPS and RATES hold for all of them) and publishes
the same events in the same order: ``job.started``, the last log lines and progress, then the
event of the state the job ended in.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from ... import clock
from ...conf import jobs_settings
from ...kinds.hooks import call_hooks
from ...states import ENDED_STATES
from ...store import Claim
from ...store.base import ClaimSkip
from ..rows import fleet
from ..rows.publish import STATE_EVENTS, publish
from .context import LiveState
from .executor import Executor
from .limits import claim_within_limits

if TYPE_CHECKING:
    from ...models import Job
    from ...store import Outcome, Store


def run_next(
    store: Store,
    executor: Executor,
    *,
    engine: str | None = None,
    queues: list[str] | None = None,
    watch: Callable[[Job | None, LiveState | None], None] | None = None,
) -> Job | None:
    """Claim one due job for ``executor``'s worker id, run it and record its outcome.

    Returns the job as it was recorded (re-read from the row), or None when nothing is due
    that the caps and rates allow. ``watch(job, live)`` is told of the job while it runs and
    ``watch(None, None)`` after (``jobs drain`` keeps its lease alive with it).
    """
    now = clock.now()
    # Paused queues are passed over here as by every worker: read on each call, so a pause
    # takes effect at the next job of a drain.
    paused = fleet.paused_pairs(engine)
    claimed = claim_within_limits(
        store,
        Claim(
            engine=engine,
            worker_id=executor.worker_id,
            limit=1,
            now=now,
            leased_until=now + jobs_settings.lease,
            queues=queues,
            skip=ClaimSkip(paused=paused) if paused else None,
        ),
    )
    if not claimed:
        return None
    job = claimed[0]
    live = LiveState(job)
    started = begin_attempt(job)
    if watch is not None:
        watch(job, live)
    try:
        outcome = executor.run(job, live, started)
    finally:
        if watch is not None:
            watch(None, None)
    written = outcome.job_id in store.record([outcome])
    if written:
        publish_recorded(job, outcome, live)
        if live.hooks is not None:
            call_hooks(live.hooks, job, outcome, live.exc)
    job.refresh_from_db(using=store.alias)
    return job


def begin_attempt(job: Job) -> datetime:
    """Stamp the start of ``job``'s attempt on it, publish its ``job.started``, and return the
    stamp (for ``Executor.run``).

    The stamp is taken as the attempt begins, not at the claim: a worker's prefetched job may
    wait in its local queue after the claim. So ``job.started`` (its ``at`` and its job's
    ``started_at``), the recorded outcome and every later event carry the same moment.
    """
    started = clock.now()
    job.started_at = started
    publish("job.started", job, at=started)
    return started


def publish_recorded(job: Job, outcome: Outcome, live: LiveState) -> None:
    """Publish what a recorded outcome changed: the runner's last log lines and progress
    (taken with the outcome, so published as of before the state changed), then the event of
    the state it ended in. ``job`` is brought up to date with the outcome on the way."""
    job.progress = outcome.progress if outcome.progress is not None else job.progress
    job.log = outcome.log if outcome.log is not None else job.log
    lines, progress_changed = live.final
    for line in lines:
        publish("job.log", job, line=line)
    if progress_changed:
        publish("job.progress", job)
    job.state = outcome.state
    job.result, job.error = outcome.result, outcome.error
    job.started_at, job.wait_reason = outcome.started_at, outcome.wait_reason
    if outcome.state in ENDED_STATES:
        job.ended_at = outcome.ended_at
    if outcome.run_at is not None:
        job.run_at = outcome.run_at
    publish(STATE_EVENTS[outcome.state], job)
