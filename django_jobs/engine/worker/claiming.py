"""The claim loop: claim in batches, keep the local queue topped up, give back what waits in vain.

It runs in the worker's main thread until the worker stops (or, with ``burst``, until idle).
Each round it claims enough to fill the free slots plus about 50 ms of work ahead (the
prefetch), once the work still to run drops to the slots plus half that. Jobs claimed but not
started go back to the queue, their attempts not used, when they would wait in vain: their queue
was paused since the claim, every thread is held by a long job, or the worker stops.
"""

from __future__ import annotations

import functools
import logging
import queue
import time
from collections.abc import Callable

from ... import clock
from ...models import Job
from ...store import Claim
from ...store.base import ClaimSkip
from ..run.context import LiveState
from ..run.limits import claim_within_limits
from .ledger import RECORD_BATCH, Ledger
from .retrying import DatabaseRetry

logger = logging.getLogger("django_jobs.worker")

#: Seconds every executor thread of a worker process (under a supervisor) may stay busy, no job
#: starting, before the jobs claimed ahead (prefetched) are handed back for other workers to
#: run, and no more are claimed ahead until a thread frees: a long job never holds short ones
#: hostage. ``--processes 0`` keeps the prefetch of one process's threads as it was.
HOSTAGE_AFTER = 0.5
#: Seconds into the claim loop after which the listener connects even if the claims have not
#: caught up with the queue yet (a cancel or a pause is then heard at once again).
LISTEN_AFTER = 1.0


class Claimer:
    """Claims the jobs of one worker and gives back those it cannot start."""

    def __init__(self, ledger: Ledger, retry: DatabaseRetry) -> None:
        self.ledger = ledger
        self.retry = retry

    def target(self) -> int:
        """How many jobs to hold: the free slots plus about 50 ms of prefetched work; none ahead
        while every thread is stuck in a long job (``HOSTAGE_AFTER``)."""
        ledger = self.ledger
        if self.stalled():
            return ledger.concurrency
        if ledger.parent is not None and ledger.avg_duration > HOSTAGE_AFTER:
            # Its jobs are long: what it claimed ahead would be handed back at each of them
            # (``release_hostages``), again and again. A claim's round trip is little beside
            # such a job: none ahead.
            return ledger.concurrency
        if ledger.avg_duration <= 0:
            extra = ledger.concurrency
        else:
            extra = int(0.05 * ledger.concurrency / ledger.avg_duration)
        return ledger.concurrency + max(1, min(extra, ledger.max_prefetch))

    def run(self, supervise: Callable[[], None], caught_up: Callable[[], None]) -> None:
        """The claim loop, until the worker stops; ``supervise`` (the executor threads') first
        in each round; ``caught_up`` once, when a claim first finds fewer jobs due than it
        asked for (the loop has caught up with the queue), or ``LISTEN_AFTER`` seconds into the
        loop at the latest: the listener connects then. Under a backlog the claims, not the
        notifications, find the work, and a child that lives a few jobs
        (``--max-jobs-per-child``) opens no connection to listen."""
        ledger = self.ledger
        if ledger.parent is not None:
            # The slot's previous child may still be making its last claim (``engine.child``).
            ledger.parent.wait_gate(ledger.stopping)
        idle_checks = 0
        listening = False
        listen_at = time.monotonic() + LISTEN_AFTER
        while not ledger.stopping.is_set():
            ledger.wake.clear()  # before reading the counts: a later change sets it again
            supervise()
            target = self.target()
            # Refill once the work still to run drops to the slots plus half the prefetch: a
            # whole batch at a time, not job by job, and the claim's round trip overlaps the
            # jobs still queued. Finished jobs whose outcome the keeper has not recorded yet
            # count apart, up to one record batch.
            refill_at = ledger.concurrency + (target - ledger.concurrency) // 2
            with ledger.running_lock:
                held, unfinished = ledger.in_flight, ledger.unfinished
                ledger.refill_at = refill_at
            want = target - unfinished
            if ledger.max_jobs is not None:
                want = min(want, ledger.max_jobs - ledger.claimed_total)
            claimed: list[Job] = []
            if want > 0 and unfinished <= refill_at and held - unfinished < RECORD_BATCH:
                now = clock.now()
                claimed = (
                    self.retry(
                        functools.partial(
                            claim_within_limits,
                            ledger.store,
                            Claim(
                                engine=ledger.engine,
                                worker_id=ledger.worker_id,
                                limit=want,
                                now=now,
                                leased_until=now + ledger.lease,
                                queues=ledger.queues,
                                skip=(
                                    ClaimSkip(queues=sorted(ledger.paused))
                                    if ledger.paused
                                    else None
                                ),
                            ),
                        )
                    )
                    or []
                )
                if claimed:
                    ledger.claimed_total += len(claimed)
                    if (
                        ledger.max_jobs is not None
                        and ledger.claimed_total >= ledger.max_jobs - ledger.concurrency
                    ):
                        # A thread's worth of jobs left to claim: the next child starts now,
                        # to be ready as this one's last jobs end.
                        ledger.ask_replacement()
                    if ledger.max_jobs is not None and ledger.claimed_total >= ledger.max_jobs:
                        ledger.claims_no_more()  # the next child claims from now on
                    with ledger.running_lock:
                        ledger.in_flight += len(claimed)
                        ledger.unfinished += len(claimed)
                        # Held from the claim on: a cancel flags a job still in the local
                        # queue too (``Listener.cancels_heard``).
                        for job in claimed:
                            ledger.running[job.pk] = (job, LiveState(job))
                    for job in claimed:
                        ledger.local.put(job)
                    idle_checks = 0
                if len(claimed) < want:
                    listen_at = 0.0  # caught up: every job due is claimed
                if claimed:
                    if len(claimed) >= want:
                        continue  # a full claim: more may be due, ask again at once
                    # A short claim took every job due: asking again at once would find none,
                    # and its round trip would hold the GIL while the executor starts the job
                    # just claimed. A NOTIFY, a job's end or the poll sets ``wake``.
            if ledger.burst and not claimed:
                with ledger.running_lock:
                    idle = ledger.in_flight == 0
                if idle and ledger.outcomes.empty():
                    idle_checks += 1
                    if idle_checks >= 2:  # twice in a row, so a just-recorded retry is seen
                        return
                    continue
            if not listening and time.monotonic() >= listen_at:
                listening = True
                caught_up()
            ledger.wake.wait(ledger.poll if not ledger.burst else 0.05)

    def stalled(self) -> bool:
        """Every executor thread busy and none started a job for ``HOSTAGE_AFTER``: what was
        claimed ahead would wait for a long job to end."""
        ledger = self.ledger
        if ledger.parent is None:
            return False
        with ledger.running_lock:
            if not ledger.held or any(job is None for job in ledger.held):
                return False
            latest = max(ledger.held_since)
        return time.monotonic() - latest > HOSTAGE_AFTER

    def release_hostages(self) -> None:
        """Hand back the jobs claimed ahead while every thread is stuck in a long job, so
        another worker (or another child) runs them now; their attempts are not used."""
        ledger = self.ledger
        if ledger.stopping.is_set() or ledger.local.empty() or not self.stalled():
            return
        jobs: list[Job] = []
        while True:
            try:
                item = ledger.local.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Job):
                jobs.append(item)
            else:
                ledger.local.put(item)  # a STOP: not ours to take
                break
        if not jobs:
            return
        ids = [job.pk for job in jobs]
        self.retry(lambda: ledger.store.hand_back(ledger.worker_id, ids), forever=True)
        with ledger.running_lock:
            ledger.forget(ids)
            ledger.claimed_total -= len(ids)
        logger.info(
            "Worker %s: every thread is in a long job; handed back %s job(s) claimed ahead.",
            ledger.worker_id,
            len(ids),
        )

    def hand_back_paused(self, job: Job, slot: int) -> None:
        """A job claimed before its queue was paused, not started yet: back to the queue, its
        attempt not used (the claim passes over it until the queue resumes)."""
        ledger = self.ledger
        self.retry(lambda: ledger.store.hand_back(ledger.worker_id, [job.pk]), forever=True)
        with ledger.running_lock:
            ledger.held[slot] = None
            ledger.forget([job.pk])
        ledger.wake.set()

    def hand_back_unstarted(self) -> None:
        """As the worker stops: the jobs still waiting in the local queue go back unstarted."""
        ledger = self.ledger
        unstarted = []
        while True:
            try:
                item = ledger.local.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Job):
                unstarted.append(item.pk)
        if unstarted:
            self.retry(lambda: ledger.store.hand_back(ledger.worker_id, unstarted))
            with ledger.running_lock:
                ledger.forget(unstarted)
