"""One claimed job's attempt in an executor thread, from its start to its outcome on the keeper's
queue; its lines on ``django_jobs.worker``; hard time limits under a supervisor.
"""

from __future__ import annotations

import logging
import threading
import time

from ...kinds.registry import all_handles, get
from ...models import Job
from ...printable import printable
from ...states import JobState
from ...store import Outcome
from ..durable.step_writer import LEADERS, StepWriter
from ..run.context import LiveState
from ..run.executor import Executor
from ..run.loops import drop_broken_connections
from ..run.runner import begin_attempt
from .child import resident_memory
from .claiming import Claimer
from .ledger import Ledger

logger = logging.getLogger("django_jobs.worker")

#: What the end line of a job says for each state its attempt left it in.
_OUTCOME: dict[str, str] = {JobState.QUEUED: "retrying"}


def log_job_started(job: Job, worker_id: str) -> None:
    """One DEBUG line on ``django_jobs.worker`` as an attempt starts (``runjobs -v 2``):
    ``job.started job=ID kind=K attempt=N queue=Q``, with the same fields as the record's
    extras (for a JSON formatter), and ``job_id`` as every record made while a job runs has
    it (``engine.observe.records``).

    On the hot path: callers test ``logger.isEnabledFor(logging.DEBUG)`` first, and call this
    only then, so a worker that does not log at DEBUG builds nothing per job.
    """
    kind, queue = printable(job.kind), printable(job.queue)
    logger.debug(
        "job.started job=%s kind=%s attempt=%s queue=%s",
        job.pk,
        kind,
        job.attempts,
        queue,
        extra={
            "event": "job.started",
            "job": job.pk,
            "job_id": job.pk,
            "kind": kind,
            "attempt": job.attempts,
            "queue": queue,
            "worker": worker_id,
        },
    )


def log_job_ended(job: Job, outcome: Outcome, seconds: float, worker_id: str) -> None:
    """One INFO line on ``django_jobs.worker`` as an attempt ends: ``job.ended job=ID kind=K
    attempt=N queue=Q outcome=O duration_s=S``. ``outcome`` is the state the attempt left the job in
    (``succeeded``, ``failed``, ``waiting``, ``blocked``, ``unknown``, ``cancelled``), or
    ``retrying`` when it failed and another attempt is due. Called, like
    ``log_job_started``, only when the logger is enabled for INFO.
    """
    kind, queue = printable(job.kind), printable(job.queue)
    outcome_name = _OUTCOME.get(outcome.state, outcome.state)
    duration = round(seconds, 6)
    logger.info(
        "job.ended job=%s kind=%s attempt=%s queue=%s outcome=%s duration_s=%s",
        job.pk,
        kind,
        job.attempts,
        queue,
        outcome_name,
        duration,
        extra={
            "event": "job.ended",
            "job": job.pk,
            "job_id": job.pk,
            "kind": kind,
            "attempt": job.attempts,
            "queue": queue,
            "outcome": outcome_name,
            "duration_s": duration,
            "worker": worker_id,
        },
    )


def log_crashed(job: Job, outcome: Outcome, worker_id: str) -> None:
    if logger.isEnabledFor(logging.INFO):
        began, ended = outcome.started_at, outcome.ended_at
        seconds = (ended - began).total_seconds() if began and ended else 0.0
        log_job_ended(job, outcome, seconds, worker_id)


def say_only_soft_limits(engine: str) -> None:
    """Jobs in this process (``--processes 0``): no process to end, so a kind's
    ``time_limit`` cannot hold. Said at start, for the kinds that set one."""
    kinds = sorted(h.kind for h in all_handles() if h.time_limit is not None and h.engine == engine)
    if kinds:
        logger.warning(
            "Jobs run in this process (--processes 0): only soft time limits (timeout=) "
            "hold here; the time_limit of %s needs worker processes (--processes 1 or "
            "more).",
            ", ".join(printable(kind) for kind in kinds),
        )


class Attempts:
    """Runs the attempts of one worker's jobs, each in the executor thread that took it."""

    def __init__(self, ledger: Ledger, claimer: Claimer) -> None:
        self.ledger = ledger
        self.claimer = claimer
        # Under a supervisor, hard time limits hold: a body past its kind's ``time_limit`` is
        # stopped and its attempt failed at once (``stopped_at_hard_limit``).
        self.executor = Executor(
            ledger.worker_id,
            hard_stop=self.stopped_at_hard_limit if ledger.parent is not None else None,
        )
        self.hard_limits: dict[str, float | None] = {}
        # The group commit of the executor threads' step rows (``engine.step_writer``);
        # None: each thread writes its own.
        self.step_writer: StepWriter | None = None

    def start(self) -> None:
        """Before the executor threads start."""
        if self.ledger.concurrency > LEADERS:  # fewer threads than leaders: each writes its own
            self.step_writer = StepWriter(self.ledger.alias)

    def execute(self, job: Job, slot: int) -> None:
        ledger = self.ledger
        if ledger.paused and job.queue in ledger.paused:
            self.claimer.hand_back_paused(job, slot)
            return
        with ledger.running_lock:
            entry = ledger.running.get(job.pk)
            live = entry[1] if entry is not None else LiveState(job)
            ledger.running[job.pk] = (job, live)
        live.step_writer = self.step_writer
        started = begin_attempt(job)
        logged = logger.isEnabledFor(logging.INFO)  # per job: nothing built when it is off
        if logged and logger.isEnabledFor(logging.DEBUG):
            log_job_started(job, ledger.worker_id)
        limit = None
        if ledger.parent is not None:
            # Before the runner is called: if this process dies from now on, the attempt
            # started (``WORKER_LOST``); before, the job goes back uncounted.
            limit = self.hard_limit(job.kind)
            live.announced = True
            ledger.parent.started(job.pk, limit)
        began = time.perf_counter()
        try:
            drop_broken_connections()
            outcome = self.executor.run(job, live, started)
        finally:
            elapsed = time.perf_counter() - began
            ledger.avg_duration = (
                0.8 * ledger.avg_duration + 0.2 * elapsed if ledger.avg_duration else elapsed
            )
        with ledger.running_lock:  # with ``held`` cleared, so a dying thread's job is failed once
            if threading.current_thread() in ledger.abandoned:
                return  # the attempt was already failed for running past its timeout
            ledger.held[slot] = None
            ledger.stuck.discard(threading.current_thread())
            if not live.stopped:  # else its hard limit recorded the attempt: this is dropped
                ledger.outcomes.put(outcome)
                ledger.unfinished -= 1
            refill = ledger.unfinished <= ledger.refill_at
            drained = ledger.unfinished == 0
        if limit is not None:
            ledger.parent.unwound(job.pk)  # type: ignore[union-attr]
        if logged:
            log_job_ended(job, outcome, elapsed, ledger.worker_id)
        if refill:
            ledger.wake.set()
        if ledger.max_jobs is not None and ledger.claimed_total >= ledger.max_jobs and drained:
            ledger.recycle(f"{ledger.max_jobs} jobs run (--max-jobs-per-child)")
        if ledger.max_memory is not None:
            resident = resident_memory()
            if resident > ledger.max_memory:
                ledger.recycle(
                    f"resident memory {resident // 2**20} MiB is above "
                    f"{ledger.max_memory // 2**20} MiB (--max-memory-per-child)"
                )

    def stopped_at_hard_limit(self, job: Job, live: LiveState, outcome: Outcome) -> None:
        """In the timer thread, as ``job``'s body is stopped at its hard time limit: its
        attempt fails now (recorded by the keeper), whatever its thread does next."""
        ledger = self.ledger
        with ledger.running_lock:
            slot = next((at for at, held in enumerate(ledger.held) if held is job), None)
            if slot is None or live.stopped:
                return  # it ended meanwhile: its own outcome stands
            live.stopped = True
            ledger.stuck.add(ledger.threads[slot])
            ledger.outcomes.put(outcome)
            ledger.unfinished -= 1
        log_crashed(job, outcome, ledger.worker_id)
        logger.error(
            "Job %s (%s): %s; its attempt is recorded failed.",
            job.pk,
            printable(job.kind),
            (outcome.error or "").split("\n", 1)[0],
        )

    def hard_limit(self, kind: str) -> float | None:
        """Seconds of the kind's hard time limit (``@job(time_limit=)``), or None."""
        try:
            return self.hard_limits[kind]
        except KeyError:
            handle = get(kind)
            limit = handle.hard_limit if handle is not None else None
            seconds = limit.total_seconds() if limit is not None else None
            self.hard_limits[kind] = seconds
            return seconds
