"""The jobs of the children, from the parent: a hard limit overrun ends a child, and a child's
death settles the jobs it still held.

``LostAttempts.murder_overdue``: a job whose thread did not unwind ``UNWIND_GRACE`` after its hard
time limit (blocked in a C call): its child stops claiming (SIGTERM), its other jobs get
``KILL_GRACE``, then SIGKILL.

``LostAttempts.end_lost_attempts``: only the parent knows that a child died and how. A job it
started ends at once through the executor's crash path (``WORKER_LOST``, or ``JOB_TIMEOUT`` for
the job it was ended for), so the retry policy applies and the events go out; a job it claimed
and never started (the pipe's ``S`` tells), and a job of a child ended for another job's time
limit, go back to the queue at their place, their attempt not used. The jobs are looked at once
more ``LATE_CLAIMS`` later, for a claim that committed after the child's end.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from datetime import timedelta

from django.db import DatabaseError, close_old_connections, connections

from ...conf import jobs_settings
from ...durations import format_duration
from ...exceptions import JobTimeout, WorkerLost
from ...kinds.hooks import call_hooks
from ...models import Job
from ...states import JobState
from ...store import get_store
from ..rows.publish import STATE_EVENTS, publish
from ..run.context import LiveState
from ..run.executor import Executor
from ..run.runner import publish_recorded
from .children import Child

logger = logging.getLogger("django_jobs.worker")

#: Seconds after a job's hard time limit (when the child stopped it and recorded its attempt)
#: before the parent ends the child if the job's thread has not unwound: it is blocked in C.
UNWIND_GRACE = 1.0
#: Seconds after a child died before its jobs are looked at once more: a claim its connection
#: sent just before the end may commit after the first look (it never started).
LATE_CLAIMS = 2.0


class LostAttempts:
    """The supervisor's hand on its children's jobs, through the database ``alias``."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        #: Children that died, to look at their jobs once more: (monotonic time, child, how).
        self.lost: deque[tuple[float, Child, str]] = deque()

    def murder_overdue(self, children: list[Child]) -> None:
        """End the children whose job's thread did not unwind ``UNWIND_GRACE`` after its hard
        time limit (the child stopped the job and recorded its attempt at the limit; the thread
        is blocked in a C call): SIGTERM, so the child claims no more and its other jobs
        finish, then SIGKILL ``JOBS["KILL_GRACE"]`` later. And look again at the jobs of the
        children that died ``LATE_CLAIMS`` ago."""
        now = time.monotonic()
        for child in children:
            if child.kill_at is not None:
                if now >= child.kill_at:
                    child.kill_at = float("inf")
                    child.signal(signal.SIGKILL)
                continue
            late = {
                job_id: limit
                for job_id, (at, limit) in child.limited.items()
                if now >= at + UNWIND_GRACE
            }
            if not late:
                continue
            child.overdue.update(late)
            grace = jobs_settings.kill_grace.total_seconds()
            child.kill_at = now + grace
            for job_id, limit in late.items():
                logger.error(
                    "Job %s did not stop at its time limit of %s (blocked in a C call?): "
                    "worker process %s claims no more, its other jobs get up to %s to finish, "
                    "then it is killed.",
                    job_id,
                    format_duration(timedelta(seconds=limit)),
                    child.pid,
                    format_duration(timedelta(seconds=grace)),
                )
            child.signal(signal.SIGTERM)
        while self.lost and now >= self.lost[0][0]:
            _, child, how = self.lost.popleft()
            self.end_lost_attempts(child, how, again=True)

    def end_lost_attempts(self, child: Child, how: str, *, again: bool = False) -> None:
        """Settle the jobs a child that died still held. A job it started: ``JOB_TIMEOUT``
        for a job it was ended for, ``WORKER_LOST`` for the others (the retry policy applies;
        the attempt counts), or, when it was ended for another job's time limit, queued again
        uncounted. A job it claimed and never started: queued again, uncounted. Each keeps its
        place (its ``run_at``). ``again``: the look ``LATE_CLAIMS`` later, for a claim that
        committed after the child's end."""
        worker_id = child.worker_id
        assert worker_id is not None
        for attempt in range(5):
            try:
                close_old_connections()
                ended, back = self._end_attempts(worker_id, child, how)
            except DatabaseError as exc:
                logger.error(
                    "Could not end the jobs of worker process %s (%s); trying again.",
                    child.pid,
                    exc,
                )
                connections[self.alias].close()
                time.sleep(min(0.2 * 2**attempt, 2.0))
                continue
            if ended:
                logger.error(
                    "Worker process %s died (%s) while running job(s) %s: their attempts ended.",
                    child.pid,
                    how,
                    ", ".join(str(job_id) for job_id in ended),
                )
            if back:
                logger.warning(
                    "Worker process %s ended (%s): job(s) %s queued again, their attempts not "
                    "used.",
                    child.pid,
                    how,
                    ", ".join(str(job_id) for job_id in back),
                )
            if not again:
                self.lost.append((time.monotonic() + LATE_CLAIMS, child, how))
            return
        logger.error(
            "Gave up ending the jobs of worker process %s: their lease returns them.", child.pid
        )

    def _end_attempts(self, worker_id: str, child: Child, how: str) -> tuple[list[int], list[int]]:
        """Settle the dead child's jobs; return (ids whose attempt ended, ids queued again)."""
        jobs = list(
            Job.objects.using(self.alias).filter(worker_id=worker_id, state=JobState.RUNNING)
        )
        if not jobs:
            return [], []
        store = get_store(self.alias)
        unstarted = [j for j in jobs if j.pk not in child.begun and j.pk not in child.overdue]
        back = [j.pk for j in unstarted if store.hand_back(worker_id, [j.pk])]
        started = [j for j in jobs if j not in unstarted]
        culprit = min(child.overdue) if child.overdue else None
        innocent = [j for j in started if culprit is not None and j.pk not in child.overdue]
        if innocent:
            reason = f"requeued: its worker process was ended for job {culprit}'s time limit"
            for job in innocent:
                if store.hand_back(worker_id, [job.pk], reason, pid=child.pid):
                    back.append(job.pk)
                    job.state, job.error = JobState.QUEUED, reason
                    job.attempts -= 1 if job.wait_reason is None else 0
                    publish(STATE_EVENTS[JobState.QUEUED], job)
        executor = Executor(worker_id)
        ending = []
        for job in started:
            if job in innocent:
                continue
            limit = child.overdue.get(job.pk)
            exc: Exception
            if limit is not None:
                exc = JobTimeout(
                    f"stopped at its time limit of {format_duration(timedelta(seconds=limit))}"
                )
            else:
                exc = WorkerLost(f"worker process {child.pid} died ({how}) while running this job")
            live = LiveState(job)
            outcome = executor.crashed(job, exc, live)
            outcome.pid = child.pid  # the process that ran it, not this one
            ending.append((job, outcome, live, exc))
        written = set(store.record([outcome for _, outcome, _, _ in ending]))
        for job, outcome, live, exc in ending:
            if job.pk in written:
                publish_recorded(job, outcome, live)
                if live.hooks is not None:
                    call_hooks(live.hooks, job, outcome, exc)
        return [job.pk for job, *_ in ending if job.pk in written], back
