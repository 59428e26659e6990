"""The executor threads of a worker: ``concurrency`` of them drain its local queue, one job each
at a time. The claim loop supervises them each round: a thread that died has its job failed
and a new thread takes its slot; a thread stuck in a job well past its timeout is abandoned to
it and replaced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from django.db import connections

from ... import clock
from ...durations import format_duration
from ...exceptions import JobTimeout
from ...kinds.registry import get
from ...models import Job
from ...printable import printable
from ..run.executor import describe_exception, hang_grace
from ..run.loops import close_thread_loop
from .attempts import Attempts, log_crashed
from .ledger import STOP, Ledger

logger = logging.getLogger("django_jobs.worker")


class ExecutorPool:
    """The executor threads of one worker, one per slot, and their replacements."""

    def __init__(
        self, ledger: Ledger, attempts: Attempts, *, run_job: Callable[[Job, int], None]
    ) -> None:
        self.ledger = ledger
        self.attempts = attempts
        #: What a thread calls for each job it takes: ``Worker._execute``.
        self.run_job = run_job
        self.vacant: set[int] = set()  # slots whose new thread the system refused
        # Why a slot's thread died (if it did).
        self.deaths: dict[int, BaseException] = {}

    def start(self) -> None:
        ledger = self.ledger
        ledger.held = [None] * ledger.concurrency
        ledger.held_since = [0.0] * ledger.concurrency
        ledger.threads = [self._start_thread(slot) for slot in range(ledger.concurrency)]

    def stop(self) -> None:
        """Let each thread finish its job and end; wait for them."""
        ledger = self.ledger
        # A vacant slot's thread is the one it lost (abandoned to a hung runner, or dead).
        threads = [t for slot, t in enumerate(ledger.threads) if slot not in self.vacant]
        for _ in threads:
            ledger.local.put(STOP)
        for thread in threads:
            # A thread stuck past its hard limit is not waited for: its attempt is recorded,
            # and the process exits under it (the supervisor is ending it for that).
            while thread.is_alive() and thread not in ledger.stuck:
                thread.join(0.1)
        self.supervise(replace=False)  # a thread that died while finishing

    def _start_thread(self, slot: int) -> threading.Thread:
        thread = threading.Thread(
            target=self._loop, args=(slot,), name=f"jobs-exec-{slot}", daemon=True
        )
        thread.start()
        return thread

    def _loop(self, slot: int) -> None:
        ledger, run_job = self.ledger, self.run_job
        me = threading.current_thread()
        try:
            while True:
                item = ledger.local.get()
                if item is STOP:
                    return
                with ledger.running_lock:
                    ledger.held[slot] = item
                    ledger.held_since[slot] = time.monotonic()
                run_job(item, slot)
                if me in ledger.abandoned:
                    return  # its slot has a new thread
        except BaseException as exc:
            # The runner raised KeyboardInterrupt, or the worker itself failed: this thread
            # ends. The claim loop sees it, fails the job it held and starts another thread.
            if me not in ledger.abandoned:
                self.deaths[slot] = exc
                ledger.wake.set()
        finally:
            ledger.abandoned.discard(me)
            close_thread_loop()
            connections.close_all()

    def supervise(self, *, replace: bool = True) -> None:
        """Replace executor threads that died or are stuck in a job past its timeout.

        A dead thread's job would otherwise stay ``running`` for good (the keeper renews the
        leases of every job this worker holds), and ``--burst`` would never end.
        """
        ledger = self.ledger
        now = clock.now()
        if replace:
            for slot in sorted(self.vacant):
                self._replace(slot)
        for slot, thread in enumerate(ledger.threads):
            if slot in self.vacant:
                continue
            if thread.is_alive():
                if replace:
                    self._abandon_if_hung(slot, thread, now)
                continue
            if ledger.stopping.is_set() and slot not in self.deaths:
                continue  # ended on STOP
            exc = self.deaths.pop(slot, None)
            with ledger.running_lock:
                job, ledger.held[slot] = ledger.held[slot], None
                entry = ledger.running.get(job.pk) if job is not None else None
            where = f" while running job {job.pk} ({printable(job.kind)})" if job else ""
            logger.error(
                "Executor thread %s died%s: %s%s",
                thread.name,
                where,
                describe_exception(exc, for_log=True) if exc else "no error",
                "; replaced by a new thread." if replace else ".",
            )
            if job is not None and not (entry is not None and entry[1].stopped):
                outcome = self.attempts.executor.crashed(job, exc, entry[1] if entry else None)
                with ledger.running_lock:
                    ledger.outcomes.put(outcome)
                    ledger.unfinished -= 1
                log_crashed(job, outcome, ledger.worker_id)
            if replace:
                self._replace(slot)

    def _replace(self, slot: int) -> None:
        """A new executor thread for ``slot``.

        When the system refuses one (``can't start new thread``: no memory left for its
        stack, as beside a runner that exhausted it, or no threads left) the slot stays vacant
        and each later round of the claim loop tries again; the worker goes on with the slots
        it has rather than stop with its jobs still held.
        """
        try:
            self.ledger.threads[slot] = self._start_thread(slot)
        except RuntimeError as exc:
            if slot not in self.vacant:
                logger.error(
                    "Could not start a new executor thread for slot %s (%s); the worker goes "
                    "on with one slot fewer and tries again.",
                    slot,
                    exc,
                )
            self.vacant.add(slot)
        else:
            if slot in self.vacant:
                logger.info("Executor slot %s has a thread again.", slot)
            self.vacant.discard(slot)

    def _abandon_if_hung(self, slot: int, thread: threading.Thread, now: datetime) -> None:
        """Fail the attempt of a job still running well past its timeout; free its slot.

        Python cannot stop a thread: a sync runner that never checks ``ctx.cancelled`` (or
        blocks in a call without a timeout) keeps its thread. The thread is left to it (what it
        returns is dropped), the attempt fails with ``JobTimeout`` (retries follow the kind's
        policy) and a new thread takes the slot, so the other jobs keep flowing.
        """
        ledger = self.ledger
        with ledger.running_lock:
            job = ledger.held[slot]
            entry = ledger.running.get(job.pk) if job is not None else None
        if job is None or entry is None or entry[1].deadline is None:
            return
        handle = get(job.kind)
        if handle is None or handle.timeout is None:
            return
        if ledger.parent is not None and handle.hard_limit is not None:
            return  # its hard limit stops it, or ends this process
        if now < entry[1].deadline + hang_grace(handle.timeout):
            return
        error = JobTimeout(
            f"Job #{job.pk} ran past its timeout of {format_duration(handle.timeout)} and did "
            "not stop; its "
            "thread was abandoned. Check ctx.cancelled in long loops and give blocking calls "
            "timeouts of their own."
        )
        outcome = self.attempts.executor.crashed(job, error, entry[1])
        with ledger.running_lock:
            if ledger.held[slot] is not job:
                return  # it ended meanwhile: its own outcome stands
            ledger.abandoned.add(thread)
            ledger.held[slot] = None
            ledger.outcomes.put(outcome)
            ledger.unfinished -= 1
        log_crashed(job, outcome, ledger.worker_id)
        logger.error(
            "Job %s (%s) ran past its timeout of %s and does not stop: thread %s is abandoned "
            "to it; a new thread takes its slot.",
            job.pk,
            printable(job.kind),
            handle.timeout,
            thread.name,
        )
        self._replace(slot)
