"""The worker: claim in batches, run on a thread pool, record outcomes in batches.

Threads: the main thread claims and keeps a small local queue topped up; ``concurrency``
executor threads drain it; one keeper thread records outcomes, flushes progress and logs,
heartbeats leases and rescues jobs whose worker died; where the store ``supports_listen``
(PostgreSQL) one listener thread turns a notification into an immediate wake-up (the poll
stays as a fallback: a notification is a hint, the claim is the truth).

Cancels of running jobs: the listener thread also hears this worker's own cancel channel
(``Store.notify_cancel``, sent by the cancel's transaction); without ``supports_listen`` the
keeper reads ``cancel_requested`` of the worker's running jobs at the poll interval (at most
every second). Either way the job's ``LiveState`` is flagged, so ``ctx.cancelled`` turns true
within about a second of the request, and a job still waiting in the local queue ends
``cancelled`` without its runner starting. The heartbeat also brings the flags, as a fallback.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections

from .. import clock
from ..conf import jobs_settings
from ..durations import format_duration
from ..exceptions import JobTimeout
from ..models import Job
from ..printable import printable
from ..registry import all_handles, get
from ..states import JobState, WorkerState
from ..store import Claim, Outcome, get_store
from ..store.base import ClaimSkip
from . import fleet
from .child import RECYCLE_EXIT, ParentChannel, resident_memory
from .context import LiveState
from .executor import Executor, describe_exception, hang_grace
from .hooks import call_hooks
from .interrupts import STACK_SIGNALS, print_stacks, watch_signals
from .limits import claim_within_limits
from .loops import bound_silent_network, close_thread_loop, drop_broken_connections
from .maintenance import end_expired_jobs, prune_expired, prune_workers, rescue_stale
from .publish import publish, writer
from .runner import begin_attempt, publish_recorded
from .scheduler import tick_until
from .step_writer import LEADERS, StepWriter

logger = logging.getLogger("django_jobs.worker")

_STOP = object()
#: Put on the keeper's queue when events wait for it to store them (``EventWriter.keep_by``).
_EVENTS: Any = object()
RECORD_BATCH = 500  # outcomes written per statement at most
#: Seconds every executor thread of a worker process (under a supervisor) may stay busy, no job
#: starting, before the jobs claimed ahead (prefetched) are handed back for other workers to
#: run, and no more are claimed ahead until a thread frees: a long job never holds short ones
#: hostage. ``--processes 0`` keeps the prefetch of one process's threads as it was.
HOSTAGE_AFTER = 0.5

#: What the end line of a job says for each state its attempt left it in.
_OUTCOME: dict[str, str] = {JobState.QUEUED: "retrying"}


def log_job_started(job: Job, worker_id: str) -> None:
    """One DEBUG line on ``django_jobs.worker`` as an attempt starts (``runjobs -v 2``):
    ``job.started job=ID kind=K attempt=N``, with the same fields as the record's extras (for
    a JSON formatter).

    On the hot path: callers test ``logger.isEnabledFor(logging.DEBUG)`` first, and call this
    only then, so a worker that does not log at DEBUG builds nothing per job.
    """
    kind = printable(job.kind)
    logger.debug(
        "job.started job=%s kind=%s attempt=%s",
        job.pk,
        kind,
        job.attempts,
        extra={
            "event": "job.started",
            "job": job.pk,
            "kind": kind,
            "attempt": job.attempts,
            "worker": worker_id,
        },
    )


def log_job_ended(job: Job, outcome: Outcome, seconds: float, worker_id: str) -> None:
    """One INFO line on ``django_jobs.worker`` as an attempt ends: ``job.ended job=ID kind=K
    attempt=N outcome=O duration_s=S``. ``outcome`` is the state the attempt left the job in
    (``succeeded``, ``failed``, ``waiting``, ``blocked``, ``unknown``, ``cancelled``), or
    ``retrying`` when it failed and another attempt is due. Called, like
    ``log_job_started``, only when the logger is enabled for INFO.
    """
    kind = printable(job.kind)
    outcome_name = _OUTCOME.get(outcome.state, outcome.state)
    duration = round(seconds, 6)
    logger.info(
        "job.ended job=%s kind=%s attempt=%s outcome=%s duration_s=%s",
        job.pk,
        kind,
        job.attempts,
        outcome_name,
        duration,
        extra={
            "event": "job.ended",
            "job": job.pk,
            "kind": kind,
            "attempt": job.attempts,
            "outcome": outcome_name,
            "duration_s": duration,
            "worker": worker_id,
        },
    )


def _log_crashed(job: Job, outcome: Outcome, worker_id: str) -> None:
    if logger.isEnabledFor(logging.INFO):
        began, ended = outcome.started_at, outcome.ended_at
        seconds = (ended - began).total_seconds() if began and ended else 0.0
        log_job_ended(job, outcome, seconds, worker_id)


#: Seconds between scheduler ticks at most, and at least (the keeper wakes every 0.1 s).
TICK_EVERY = 1.0
MIN_TICK = 0.05


def make_worker_id(engine: str, name: str | None = None) -> str:
    """``NAME:ENGINE:TOKEN``, the ``worker_id`` of the jobs it holds: ``name`` (``--name``,
    default ``host:pid``), the engine, and eight hex digits unique to this run. The job JSON's
    ``worker`` is the id without its last two parts (``models.worker_name``)."""
    return f"{name or f'{socket.gethostname()}:{os.getpid()}'}:{engine}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs the jobs of one engine until stopped (or, with ``burst``, until idle)."""

    def __init__(
        self,
        *,
        engine: str = "default",
        queues: list[str] | None = None,
        concurrency: int | None = None,
        burst: bool = False,
        scheduler: bool = True,
        alias: str | None = None,
        name: str | None = None,
        fleet_row: bool = True,
        parent: ParentChannel | None = None,
        max_jobs: int | None = None,
        max_memory: int | None = None,
    ) -> None:
        self.engine = engine
        #: Its row's name (``--name``, default ``host:pid``); ``fleet_row=False``: no row (a
        #: process whose parent writes the row for it).
        self.name = name or fleet.default_name()
        self.fleet_row = fleet_row
        #: Under a supervisor: the pipe to it (``engine.child``), and the limits after which
        #: this process finishes to be replaced (jobs started; resident bytes after a job).
        self.parent = parent
        self.max_jobs = max_jobs
        self.max_memory = max_memory
        self.claimed_total = 0
        self.recycled = False
        self.hard_limits: dict[str, float | None] = {}
        self.queues = queues or None
        self.concurrency = concurrency or jobs_settings.engine_concurrency(engine)
        self.burst = burst
        self.scheduler = scheduler
        self.alias = alias or jobs_settings.DATABASE
        self.store = get_store(self.alias)
        self.worker_id = make_worker_id(engine, self.name)
        #: The queues of this engine that are paused: the claim passes over them. Read at
        #: start, again on each ``notify_paused`` (PostgreSQL) or at the poll interval.
        self.paused: frozenset[str] = frozenset()
        self.executor = Executor(self.worker_id)
        self.lease = jobs_settings.lease
        self.poll = (
            jobs_settings.poll_interval
            if jobs_settings.POLL_INTERVAL
            else self.store.poll_interval_default
        )
        self.max_prefetch = max(int(jobs_settings.PREFETCH), 0)

        self.stopping = threading.Event()
        self.wake = threading.Event()
        # SimpleQueue: a put or get in C, no Python-level Condition per job.
        self.local: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self.running: dict[int, tuple[Job, LiveState]] = {}
        self.running_lock = threading.Lock()
        self.in_flight = 0  # claimed and not yet recorded
        self.unfinished = 0  # claimed and not yet run to an outcome
        self.refill_at = 0  # the claim loop wants waking once unfinished drops to this
        self.avg_duration = 0.0
        self.processed = 0
        self.threads: list[threading.Thread] = []
        self.vacant: set[int] = set()  # slots whose new thread the system refused
        # Per executor slot: the job its thread is running, and why the thread died (if it did).
        self.held: list[Job | None] = []
        self.held_since: list[float] = []  # monotonic time each slot's job started
        self.deaths: dict[int, BaseException] = {}
        # Threads left to a runner that ran past its timeout and would not stop (see
        # ``_abandon``): whatever they return later is dropped.
        self.abandoned: set[threading.Thread] = set()
        self.on_idle: Callable[[], None] | None = None
        # True while an _EVENTS is on the keeper's queue (one is enough).
        self.events_woken = False
        # The group commit of the executor threads' step rows (``engine.step_writer``);
        # None: each thread writes its own.
        self.step_writer: StepWriter | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        # SIGUSR1 prints every thread's stack to stderr, as Celery's worker does.
        if self.parent is not None:
            # Under a supervisor: it alone decides. A Ctrl-C reaches the whole process group:
            # the parent forwards it as SIGTERM.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            watch_signals(self._on_signal, (signal.SIGTERM, *STACK_SIGNALS))
        else:
            watch_signals(self._on_signal, (signal.SIGTERM, signal.SIGINT, *STACK_SIGNALS))

    def _on_signal(self, signum: int) -> None:
        """In the signal thread (``engine.interrupts``). SIGUSR1: every thread's stack on
        stderr. SIGTERM or SIGINT: finish the jobs in flight and stop; a second one alone exits
        at once. Under a supervisor, SIGTERMs after the first change nothing (the parent kills
        with SIGKILL when it means now)."""
        if signum in STACK_SIGNALS:
            print_stacks()
            return
        if self.parent is None and self.stopping.is_set():
            logger.warning("Second signal: exiting now; unfinished jobs return after the lease.")
            os._exit(1)
        if self.parent is None:
            logger.info("Signal %s: finishing in-flight jobs, claiming no more.", signum)
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def recycle(self, why: str) -> None:
        """Finish the jobs in flight and exit with ``RECYCLE_EXIT``, to be replaced."""
        if not self.recycled:
            self.recycled = True
            logger.info("Worker %s: %s; finishing to be replaced.", self.worker_id, why)
            self.stop()

    def run(self) -> int:
        """Work until stopped; return the process exit code."""
        logger.info(
            "Worker %s: engine=%s concurrency=%s queues=%s",
            self.worker_id,
            self.engine,
            self.concurrency,
            ",".join(self.queues or []) or "*",
        )
        if self.parent is None:
            self._say_only_soft_limits()
        # Before any thread connects: every connection of the worker gets them (the threads'
        # connections share the alias's settings).
        connections.close_all()
        bound_silent_network(self.store)
        if self.fleet_row:
            self._register_row()
        self._read_paused()
        self._rescue()
        if self.scheduler:
            self._tick_schedules()
        # The keeper stores this process's live events from now on (one statement per batch
        # of outcomes, not a thread of their own): see ``EventWriter.keep_by``.
        writer.keep_by(self._wake_for_events)
        keeper = threading.Thread(target=self._keep, name="jobs-keeper", daemon=True)
        keeper.start()
        if self.concurrency > LEADERS:  # fewer threads than leaders: each writes its own
            self.step_writer = StepWriter(self.alias)
        self.held = [None] * self.concurrency
        self.held_since = [0.0] * self.concurrency
        self.threads = [self._start_executor(slot) for slot in range(self.concurrency)]
        listener = None
        if self.store.supports_listen:
            listener = threading.Thread(target=self._listen, name="jobs-listen", daemon=True)
            listener.start()
        if self.parent is not None:
            self.parent.ready(self.worker_id)
        try:
            self._claim_loop()
        finally:
            self._shutdown(keeper)
        return RECYCLE_EXIT if self.recycled else 0

    def _say_only_soft_limits(self) -> None:
        """Jobs in this process (``--processes 0``): no process to end, so a kind's
        ``time_limit`` cannot hold. Said at start, for the kinds that set one."""
        kinds = sorted(
            h.kind for h in all_handles() if h.time_limit is not None and h.engine == self.engine
        )
        if kinds:
            logger.warning(
                "Jobs run in this process (--processes 0): only soft time limits (timeout=) "
                "hold here; the time_limit of %s needs worker processes (--processes 1 or "
                "more).",
                ", ".join(printable(kind) for kind in kinds),
            )

    def _shutdown(self, keeper: threading.Thread) -> None:
        self.stopping.set()
        self._mark(WorkerState.STOPPING)
        unstarted = []
        while True:
            try:
                item = self.local.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Job):
                unstarted.append(item.pk)
        if unstarted:
            self._retry_db(lambda: self.store.hand_back(self.worker_id, unstarted))
            with self.running_lock:
                self.in_flight -= len(unstarted)
                self.unfinished -= len(unstarted)
                for job_id in unstarted:
                    self.running.pop(job_id, None)
        # A vacant slot's thread is the one it lost (abandoned to a hung runner, or dead).
        threads = [t for slot, t in enumerate(self.threads) if slot not in self.vacant]
        for _ in threads:
            self.local.put(_STOP)
        for thread in threads:
            thread.join()
        self._supervise_executors(replace=False)  # a thread that died while finishing
        self.outcomes.put(None)  # type: ignore[arg-type]
        keeper.join()
        self._mark(WorkerState.STOPPED)
        connections.close_all()
        logger.info("Worker %s stopped after %s jobs.", self.worker_id, self.processed)

    def _mark(self, state: str) -> None:
        if not self.fleet_row:
            return
        try:
            self._retry_db(
                lambda: fleet.mark(
                    self.name,
                    state,
                    jobs_running=self._jobs_running(),
                    jobs_done=self.processed,
                    using=self.alias,
                )
            )
        except Exception:  # the row is for the operators: it must never stop a shutdown
            logger.exception("Could not mark worker %s %s.", self.name, state)

    # -- claiming -----------------------------------------------------------------------------

    def _target(self) -> int:
        """How many jobs to hold: the free slots plus about 50 ms of prefetched work; none ahead
        while every thread is stuck in a long job (``HOSTAGE_AFTER``)."""
        if self._stalled():
            return self.concurrency
        if self.avg_duration <= 0:
            extra = self.concurrency
        else:
            extra = int(0.05 * self.concurrency / self.avg_duration)
        return self.concurrency + max(1, min(extra, self.max_prefetch))

    def _claim_loop(self) -> None:
        idle_checks = 0
        while not self.stopping.is_set():
            self.wake.clear()  # before reading the counts: a later change sets it again
            self._supervise_executors()
            target = self._target()
            # Refill once the work still to run drops to the slots plus half the prefetch: a
            # whole batch at a time, not job by job, and the claim's round trip overlaps the
            # jobs still queued. Finished jobs whose outcome the keeper has not recorded yet
            # count apart, up to one record batch.
            refill_at = self.concurrency + (target - self.concurrency) // 2
            with self.running_lock:
                held, unfinished = self.in_flight, self.unfinished
                self.refill_at = refill_at
            want = target - unfinished
            if self.max_jobs is not None:
                want = min(want, self.max_jobs - self.claimed_total)
            claimed: list[Job] = []
            if want > 0 and unfinished <= refill_at and held - unfinished < RECORD_BATCH:
                now = clock.now()
                claimed = (
                    self._retry_db(
                        functools.partial(
                            claim_within_limits,
                            self.store,
                            Claim(
                                engine=self.engine,
                                worker_id=self.worker_id,
                                limit=want,
                                now=now,
                                leased_until=now + self.lease,
                                queues=self.queues,
                                skip=ClaimSkip(queues=sorted(self.paused)) if self.paused else None,
                            ),
                        )
                    )
                    or []
                )
                if claimed:
                    self.claimed_total += len(claimed)
                    with self.running_lock:
                        self.in_flight += len(claimed)
                        self.unfinished += len(claimed)
                        # Held from the claim on: a cancel flags a job still in the local
                        # queue too (``_cancels_heard``).
                        for job in claimed:
                            self.running[job.pk] = (job, LiveState(job))
                    for job in claimed:
                        self.local.put(job)
                    idle_checks = 0
                    if len(claimed) >= want:
                        continue  # a full claim: more may be due, ask again at once
                    # A short claim took every job due: asking again at once would find none,
                    # and its round trip would hold the GIL while the executor starts the job
                    # just claimed. A NOTIFY, a job's end or the poll sets ``wake``.
            if self.burst and not claimed:
                with self.running_lock:
                    idle = self.in_flight == 0
                if idle and self.outcomes.empty():
                    idle_checks += 1
                    if idle_checks >= 2:  # twice in a row, so a just-recorded retry is seen
                        return
                    continue
            self.wake.wait(self.poll if not self.burst else 0.05)

    def _listen(self) -> None:
        # Only where the store supports_listen (the caller checks).
        cancels = self.store.cancel_channel(self.worker_id)
        paused = self.store.paused_channel
        try:
            while not self.stopping.is_set():
                try:
                    listener = self.store.listen_for_jobs(self.worker_id)
                    try:
                        # We may have missed notifications while (re)connecting.
                        self.wake.set()
                        self._cancels_heard(self.store.cancels_requested(self.worker_id))
                        self._read_paused()
                        while not self.stopping.is_set():
                            heard = listener.wait_notifications(0.5)
                            if any(c == paused and p == self.engine for c, p in heard):
                                self._read_paused()
                            if any(
                                c not in (cancels, paused) and p == self.engine for c, p in heard
                            ):
                                self.wake.set()
                            self._cancels_heard([int(p) for c, p in heard if c == cancels])
                    finally:
                        listener.close()
                except Exception:
                    logger.warning(
                        "LISTEN connection lost; polling until it is back.", exc_info=True
                    )
                    connections[self.alias].close()
                    self.stopping.wait(1.0)
        finally:
            connections.close_all()

    def _cancels_heard(self, job_ids: list[int]) -> None:
        """Flag the cancels of these jobs, if this worker still holds them."""
        with self.running_lock:
            for job_id in job_ids:
                entry = self.running.get(job_id)
                if entry is not None and not entry[1].cancel_requested:
                    entry[1].cancel_requested = True
                    logger.info("Job %s: cancel requested; its runner sees ctx.cancelled.", job_id)

    def _register_row(self) -> None:
        """Write this worker's row (``engine.fleet``): at start, and again after a heartbeat
        found it gone (pruned, or deleted by hand)."""
        self._retry_db(
            lambda: fleet.register(
                self.name,
                engine=self.engine,
                queues=self.queues,
                concurrency=self.concurrency,
                using=self.alias,
            )
        )

    def _read_paused(self) -> None:
        """Read which queues of this engine are paused; wake the claim loop when one resumed."""
        paused = self._retry_db(lambda: fleet.paused_queues(self.engine, using=self.alias))
        if paused is None or paused == self.paused:
            return
        resumed = self.paused - paused
        self.paused = paused
        logger.info(
            "Paused queues of engine %s: %s.", self.engine, ", ".join(sorted(paused)) or "none"
        )
        if resumed:
            self.wake.set()

    def _read_cancels(self) -> None:
        """Without LISTEN: read which of this worker's running jobs have a cancel requested."""
        with self.running_lock:
            if not self.running:
                return
        flagged = self._retry_db(lambda: self.store.cancels_requested(self.worker_id))
        self._cancels_heard(flagged or [])

    # -- executing ----------------------------------------------------------------------------

    def _start_executor(self, slot: int) -> threading.Thread:
        thread = threading.Thread(
            target=self._execute_loop, args=(slot,), name=f"jobs-exec-{slot}", daemon=True
        )
        thread.start()
        return thread

    def _execute_loop(self, slot: int) -> None:
        me = threading.current_thread()
        try:
            while True:
                item = self.local.get()
                if item is _STOP:
                    return
                with self.running_lock:
                    self.held[slot] = item
                    self.held_since[slot] = time.monotonic()
                self._execute(item, slot)
                if me in self.abandoned:
                    return  # its slot has a new thread
        except BaseException as exc:
            # The runner raised KeyboardInterrupt, or the worker itself failed: this thread
            # ends. The claim loop sees it, fails the job it held and starts another thread.
            if me not in self.abandoned:
                self.deaths[slot] = exc
                self.wake.set()
        finally:
            self.abandoned.discard(me)
            close_thread_loop()
            connections.close_all()

    def _supervise_executors(self, *, replace: bool = True) -> None:
        """Replace executor threads that died or are stuck in a job past its timeout.

        A dead thread's job would otherwise stay ``running`` for good (the keeper renews the
        leases of every job this worker holds), and ``--burst`` would never end.
        """
        now = clock.now()
        if replace:
            for slot in sorted(self.vacant):
                self._replace_executor(slot)
        for slot, thread in enumerate(self.threads):
            if slot in self.vacant:
                continue
            if thread.is_alive():
                if replace:
                    self._abandon_if_hung(slot, thread, now)
                continue
            if self.stopping.is_set() and slot not in self.deaths:
                continue  # ended on _STOP
            exc = self.deaths.pop(slot, None)
            with self.running_lock:
                job, self.held[slot] = self.held[slot], None
                entry = self.running.get(job.pk) if job is not None else None
            where = f" while running job {job.pk} ({printable(job.kind)})" if job else ""
            logger.error(
                "Executor thread %s died%s: %s%s",
                thread.name,
                where,
                describe_exception(exc, for_log=True) if exc else "no error",
                "; replaced by a new thread." if replace else ".",
            )
            if job is not None:
                outcome = self.executor.crashed(job, exc, entry[1] if entry else None)
                with self.running_lock:
                    self.outcomes.put(outcome)
                    self.unfinished -= 1
                _log_crashed(job, outcome, self.worker_id)
            if replace:
                self._replace_executor(slot)

    def _replace_executor(self, slot: int) -> None:
        """A new executor thread for ``slot``.

        When the system refuses one (``can't start new thread``: no memory left for its
        stack, as beside a runner that exhausted it, or no threads left) the slot stays vacant
        and each later round of the claim loop tries again; the worker goes on with the slots
        it has rather than stop with its jobs still held.
        """
        try:
            self.threads[slot] = self._start_executor(slot)
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
        with self.running_lock:
            job = self.held[slot]
            entry = self.running.get(job.pk) if job is not None else None
        if job is None or entry is None or entry[1].deadline is None:
            return
        handle = get(job.kind)
        if handle is None or handle.timeout is None:
            return
        if now < entry[1].deadline + hang_grace(handle.timeout):
            return
        error = JobTimeout(
            f"Job #{job.pk} ran past its timeout of {format_duration(handle.timeout)} and did "
            "not stop; its "
            "thread was abandoned. Check ctx.cancelled in long loops and give blocking calls "
            "timeouts of their own."
        )
        outcome = self.executor.crashed(job, error, entry[1])
        with self.running_lock:
            if self.held[slot] is not job:
                return  # it ended meanwhile: its own outcome stands
            self.abandoned.add(thread)
            self.held[slot] = None
            self.outcomes.put(outcome)
            self.unfinished -= 1
        _log_crashed(job, outcome, self.worker_id)
        logger.error(
            "Job %s (%s) ran past its timeout of %s and does not stop: thread %s is abandoned "
            "to it; a new thread takes its slot.",
            job.pk,
            printable(job.kind),
            handle.timeout,
            thread.name,
        )
        self._replace_executor(slot)

    def _hand_back_paused(self, job: Job, slot: int) -> None:
        """A job claimed before its queue was paused, not started yet: back to the queue, its
        attempt not used (the claim passes over it until the queue resumes)."""
        self._retry_db(lambda: self.store.hand_back(self.worker_id, [job.pk]), forever=True)
        with self.running_lock:
            self.running.pop(job.pk, None)
            self.held[slot] = None
            self.in_flight -= 1
            self.unfinished -= 1
        self.wake.set()

    def _jobs_running(self) -> int:
        return sum(1 for job in self.held if job is not None)

    def _execute(self, job: Job, slot: int) -> None:
        if self.paused and job.queue in self.paused:
            self._hand_back_paused(job, slot)
            return
        with self.running_lock:
            entry = self.running.get(job.pk)
            live = entry[1] if entry is not None else LiveState(job)
            self.running[job.pk] = (job, live)
        live.step_writer = self.step_writer
        started = begin_attempt(job)
        logged = logger.isEnabledFor(logging.INFO)  # per job: nothing built when it is off
        if logged and logger.isEnabledFor(logging.DEBUG):
            log_job_started(job, self.worker_id)
        limit = self._hard_limit(job.kind) if self.parent is not None else None
        if limit is not None:
            self.parent.started(job.pk, limit)  # type: ignore[union-attr]
        began = time.perf_counter()
        try:
            drop_broken_connections()
            outcome = self.executor.run(job, live, started)
        finally:
            elapsed = time.perf_counter() - began
            self.avg_duration = (
                0.8 * self.avg_duration + 0.2 * elapsed if self.avg_duration else elapsed
            )
        with self.running_lock:  # with ``held`` cleared, so a dying thread's job is failed once
            if threading.current_thread() in self.abandoned:
                return  # the attempt was already failed for running past its timeout
            self.outcomes.put(outcome)
            self.held[slot] = None
            self.unfinished -= 1
            refill = self.unfinished <= self.refill_at
            drained = self.unfinished == 0
        if limit is not None:
            self.parent.ended(job.pk)  # type: ignore[union-attr]
        if logged:
            log_job_ended(job, outcome, elapsed, self.worker_id)
        if refill:
            self.wake.set()
        if self.max_jobs is not None and self.claimed_total >= self.max_jobs and drained:
            self.recycle(f"{self.max_jobs} jobs run (--max-jobs-per-child)")
        if self.max_memory is not None:
            resident = resident_memory()
            if resident > self.max_memory:
                self.recycle(
                    f"resident memory {resident // 2**20} MiB is above "
                    f"{self.max_memory // 2**20} MiB (--max-memory-per-child)"
                )

    def _hard_limit(self, kind: str) -> float | None:
        """Seconds of the kind's hard time limit (``@job(time_limit=)``), or None."""
        try:
            return self.hard_limits[kind]
        except KeyError:
            handle = get(kind)
            limit = handle.hard_limit if handle is not None else None
            seconds = limit.total_seconds() if limit is not None else None
            self.hard_limits[kind] = seconds
            return seconds

    def _stalled(self) -> bool:
        """Every executor thread busy and none started a job for ``HOSTAGE_AFTER``: what was
        claimed ahead would wait for a long job to end."""
        if self.parent is None:
            return False
        with self.running_lock:
            if not self.held or any(job is None for job in self.held):
                return False
            latest = max(self.held_since)
        return time.monotonic() - latest > HOSTAGE_AFTER

    def _release_hostages(self) -> None:
        """Hand back the jobs claimed ahead while every thread is stuck in a long job, so
        another worker (or another child) runs them now; their attempts are not used."""
        if self.stopping.is_set() or self.local.empty() or not self._stalled():
            return
        jobs: list[Job] = []
        while True:
            try:
                item = self.local.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Job):
                jobs.append(item)
            else:
                self.local.put(item)  # a _STOP: not ours to take
                break
        if not jobs:
            return
        ids = [job.pk for job in jobs]
        self._retry_db(lambda: self.store.hand_back(self.worker_id, ids), forever=True)
        with self.running_lock:
            self.in_flight -= len(ids)
            self.unfinished -= len(ids)
            self.claimed_total -= len(ids)
            for job_id in ids:
                self.running.pop(job_id, None)
        logger.info(
            "Worker %s: every thread is in a long job; handed back %s job(s) claimed ahead.",
            self.worker_id,
            len(ids),
        )

    # -- keeping: outcomes, live output, leases ---------------------------------------------

    def _keep(self) -> None:
        beat_every = max(self.lease.total_seconds() / 3, 0.2)
        rescue_every = max(self.lease.total_seconds() / 2, 0.5)
        next_beat = next_flush = time.monotonic()
        next_rescue = time.monotonic() + rescue_every
        next_tick = time.monotonic() + 1.0
        next_prune = time.monotonic() + 60.0
        # Without LISTEN, cancels are read at the poll interval (at most every second).
        read_cancels = not self.store.supports_listen
        cancels_every = min(self.poll, 1.0)
        next_cancels = time.monotonic()
        # Without LISTEN, the paused queues too, twice as often: a pause stops the claims
        # within a second, whatever the keeper's wake-ups (every 0.1 s) add to the poll.
        paused_every = cancels_every / 2
        next_paused = time.monotonic() + paused_every
        done = False
        try:
            while not done:
                batch: list[Outcome] = []
                try:
                    first = self.outcomes.get(timeout=0.1)
                    if first is None:
                        done = True
                    else:
                        if first is not _EVENTS:
                            batch.append(first)
                        while len(batch) < RECORD_BATCH:
                            item = self.outcomes.get_nowait()
                            if item is None:
                                done = True
                                break
                            if item is not _EVENTS:
                                batch.append(item)
                except queue.Empty:
                    pass
                if batch:
                    self._record(batch)
                # Before taking them: an event published meanwhile puts _EVENTS again.
                self.events_woken = False
                writer.store_pending()
                now = time.monotonic()
                if now >= next_flush:
                    self._flush_live()
                    self._release_hostages()
                    next_flush = now + 0.2
                if now >= next_beat:
                    self._heartbeat()
                    next_beat = now + beat_every
                if read_cancels and now >= next_cancels:
                    self._read_cancels()
                    next_cancels = now + cancels_every
                if read_cancels and now >= next_paused:
                    self._read_paused()
                    next_paused = now + paused_every
                if now >= next_rescue:
                    self._rescue()
                    next_rescue = now + rescue_every
                if self.scheduler and not self.burst and now >= next_tick:
                    next_tick = now + self._tick_schedules()
                if self.scheduler and not self.burst and now >= next_prune:
                    self._prune()
                    next_prune = now + 60.0
        finally:
            writer.store_pending()  # the last events; what fails goes to the writer thread
            writer.kept_no_more(self._wake_for_events)
            connections.close_all()

    def _wake_for_events(self) -> None:
        if not self.events_woken:
            self.events_woken = True
            self.outcomes.put(_EVENTS)

    def _record(self, batch: list[Outcome]) -> None:
        written = self._retry_db(lambda: self.store.record(batch), forever=True) or []
        with self.running_lock:
            entries = [self.running.pop(o.job_id, (None, None)) for o in batch]
            self.in_flight -= len(batch)
        self.processed += len(batch)
        self.wake.set()
        written_ids = set(written)
        for outcome, (job, live) in zip(batch, entries, strict=True):
            if job is None or live is None or outcome.job_id not in written_ids:
                continue
            publish_recorded(job, outcome, live)
            if live.hooks is not None:
                call_hooks(live.hooks, job, outcome, live.exc)

    def _flush_live(self) -> None:
        with self.running_lock:
            running = list(self.running.values())
        for job, live in running:
            taken = live.take()
            if taken is None:
                continue
            progress, log, new_lines, progress_changed = taken
            self._retry_db(
                functools.partial(self.store.save_live, job.pk, self.worker_id, progress, log)
            )
            job.progress, job.log = progress, log
            for line in new_lines:
                publish("job.log", job, line=line)
            if progress_changed:
                publish("job.progress", job)

    def _heartbeat(self) -> None:
        flags = (
            self._retry_db(lambda: self.store.heartbeat(self.worker_id, clock.now() + self.lease))
            or {}
        )
        self._cancels_heard([job_id for job_id, cancel in flags.items() if cancel])
        if self.fleet_row:
            self._beat_row()
        if self.parent is not None:
            self.parent.beat(self._jobs_running(), self.processed)
            if self.parent.orphaned and not self.stopping.is_set():
                logger.warning("Worker %s: its supervisor is gone; finishing.", self.worker_id)
                self.stop()

    def _beat_row(self) -> None:
        """The worker's row: one UPDATE per heartbeat (written again if it was pruned)."""
        written = self._retry_db(
            lambda: fleet.beat(
                self.name,
                jobs_running=self._jobs_running(),
                jobs_done=self.processed,
                using=self.alias,
            )
        )
        if written == 0 and not self.stopping.is_set():
            self._register_row()

    def _tick_schedules(self) -> float:
        """Fire the due occurrences; return the seconds until the next tick: at the next
        occurrence of the schedules (so a 20 s interval fires on time), at most 1 s (a
        schedule added meanwhile is seen within a second), at least the keeper's own beat."""
        try:
            ticked: tuple[list[Job], datetime | None] = self._retry_db(
                lambda: tick_until(clock.now())
            ) or ([], None)
            fired, next_at = ticked
        except Exception:  # a broken schedule must not stop the worker
            logger.exception("Scheduler tick failed; retrying at the next tick.")
            return TICK_EVERY
        if fired:
            logger.info(
                "Scheduler fired %s occurrence(s): %s",
                len(fired),
                ", ".join(job.idempotency_key or str(job.pk) for job in fired),
            )
            self.wake.set()
        if next_at is None:
            return TICK_EVERY
        until = (next_at - clock.now()).total_seconds()
        return min(TICK_EVERY, max(until, MIN_TICK))

    def _prune(self) -> None:
        """Apply JOBS["RETENTION"], and delete the rows of workers stopped a day ago (workers
        that run the scheduler do it, once a minute)."""
        try:
            self._retry_db(lambda: prune_expired(clock.now()))
            self._retry_db(lambda: prune_workers(clock.now(), using=self.alias))
        except Exception:  # retention must never stop the worker
            logger.exception("Pruning expired jobs failed; retrying in a minute.")

    def _rescue(self) -> None:
        self._end_expired()
        rescued = self._retry_db(
            lambda: rescue_stale(self.store, engine=self.engine, now=clock.now())
        )
        if rescued:
            logger.warning("Re-asked %s job(s) whose worker stopped: %s", len(rescued), rescued)
            self.wake.set()

    def _end_expired(self) -> None:
        """End the queued jobs whose ``expires_at`` passed unstarted (the claim passes over
        them; this makes their end seen), with the rescue's cadence."""
        try:
            ended = self._retry_db(lambda: end_expired_jobs(clock.now())) or []
        except Exception:  # expiry must never stop the worker
            logger.exception("Ending expired jobs failed; retrying at the next rescue.")
            return
        if ended:
            logger.info("Ended %s job(s) that expired before they started.", len(ended))

    def _retry_db(self, fn: Callable[[], Any], *, forever: bool = False) -> Any:
        """Run a store call; if the database is away, log, reconnect and try again."""
        delay = 0.2
        while True:
            try:
                return fn()
            except DatabaseError as exc:
                logger.error(
                    "Database unavailable (%s); retrying in %.1fs. %s", exc, delay, _hint(exc)
                )
                connections[self.alias].close()
                if self.stopping.is_set() and not forever:
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


#: SQLSTATEs of a prepared statement that is already there or missing: a server connection
#: shared by clients that each prepare (PgBouncer's transaction mode before 1.21).
_PREPARED_STATEMENT_STATES = ("42P05", "26000")


def _hint(exc: DatabaseError) -> str:
    """What to check: reconnecting does not cure a pooler that mixes prepared statements."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate in _PREPARED_STATEMENT_STATES:
        return (
            "The server connection is shared with other clients (PgBouncer in transaction "
            "mode?): set DISABLE_SERVER_SIDE_CURSORS = True on the database, or use session "
            "mode or PgBouncer 1.21+ with max_prepared_statements > 0 (docs/scaling.md)."
        )
    return "Check that it is up and takes writes (disk space, read-only mode)."
