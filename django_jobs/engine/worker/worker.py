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

``Worker`` is the composition root of its services (the modules of this package from
``ledger`` to ``retrying``), which share its ``Ledger``. It starts their threads in this order:
keeper, executors, listener, then the claim loop in the calling thread, which has the listener
connect once it has claimed what it wants. As it stops, the jobs not started are handed back,
the executor threads finish theirs, then the keeper writes the last outcomes.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta

from django.db import connections

from ...conf import jobs_settings
from ...models import Job
from ...states import WorkerState
from ...store import Store, get_store
from ..maintenance.ticks import MIN_TICK, TICK_EVERY
from ..rows import fleet
from ..run.context import LiveState
from ..run.deadlines import deadlines
from ..run.loops import bound_silent_network
from .attempts import Attempts, say_only_soft_limits
from .child import RECYCLE_EXIT, ParentChannel
from .claiming import Claimer
from .executors import ExecutorPool
from .heartbeat import Heartbeat
from .interrupts import STACK_SIGNALS, print_stacks, release_start_signals, watch_signals
from .keeper import Keeper
from .ledger import Ledger, Shared
from .listening import Listener
from .recording import Recorder
from .retrying import DatabaseRetry

# The scheduler's tick constants stay importable from here, beside the worker that ticks.
__all__ = ["MIN_TICK", "TICK_EVERY", "Worker", "make_worker_id"]

logger = logging.getLogger("django_jobs.worker")


def make_worker_id(engine: str, name: str | None = None) -> str:
    """``NAME:ENGINE:TOKEN``, the ``worker_id`` of the jobs it holds: ``name`` (``--name``,
    default ``host:pid``), the engine, and ``HEX.PID``: eight hex digits unique to this run and
    the id of this process (the one that runs the jobs: a worker process under a supervisor).
    The job JSON's ``worker`` is the id without its last two parts (``models.worker_name``),
    its ``worker_pid`` the ``PID`` (``models.worker_pid``)."""
    name = name or f"{socket.gethostname()}:{os.getpid()}"
    return f"{name}:{engine}:{uuid.uuid4().hex[:8]}.{os.getpid()}"


class Worker:
    """Runs the jobs of one engine until stopped (or, with ``burst``, until idle)."""

    # Views of the ledger: ``runjobs``, the tests and the bench read (and some set) these on
    # the worker, the services read them in the ledger; one value either way.
    engine = Shared[str]()
    name = Shared[str]()
    fleet_row = Shared[bool]()
    parent = Shared[ParentChannel | None]()
    max_jobs = Shared[int | None]()
    max_memory = Shared[int | None]()
    queues = Shared[list[str] | None]()
    concurrency = Shared[int]()
    burst = Shared[bool]()
    scheduler = Shared[bool]()
    alias = Shared[str]()
    store = Shared[Store]()
    worker_id = Shared[str]()
    lease = Shared[timedelta]()
    poll = Shared[float]()
    # ``bench/pickup_trace.py`` puts an event of its own in ``wake`` after ``__init__``: the
    # services read it in the ledger each time, never keep it.
    wake = Shared[threading.Event]()
    stopping = Shared[threading.Event]()
    paused = Shared[frozenset[str]]()
    running = Shared[dict[int, tuple[Job, LiveState]]]()
    held = Shared[list[Job | None]]()
    in_flight = Shared[int]()
    unfinished = Shared[int]()
    processed = Shared[int]()
    claimed_total = Shared[int]()
    recycled = Shared[bool]()

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
        name = name or fleet.default_name()
        alias = alias or jobs_settings.DATABASE
        store = get_store(alias)
        self.ledger = ledger = Ledger(
            engine=engine,
            name=name,
            fleet_row=fleet_row,
            worker_id=make_worker_id(engine, name),
            queues=queues or None,
            concurrency=concurrency or jobs_settings.engine_concurrency(engine),
            burst=burst,
            scheduler=scheduler,
            alias=alias,
            store=store,
            lease=jobs_settings.lease,
            poll=(
                jobs_settings.poll_interval
                if jobs_settings.POLL_INTERVAL
                else store.poll_interval_default
            ),
            max_prefetch=max(int(jobs_settings.PREFETCH), 0),
            parent=parent,
            max_jobs=max_jobs,
            max_memory=max_memory,
        )
        retry = DatabaseRetry(alias, ledger.stopping)
        self.listener = Listener(ledger, retry)
        self.heartbeat = Heartbeat(ledger, retry, self.listener)
        self.claimer = Claimer(ledger, retry)
        self.attempts = Attempts(ledger, self.claimer)
        # The executor threads run each job through ``Worker._execute``, looked up here: what
        # patches that method on the class (``bench/pickup_trace.py``) sees every job.
        self.pool = ExecutorPool(ledger, self.attempts, run_job=self._execute)
        self.recorder = Recorder(ledger, retry)
        self.keeper = Keeper(
            ledger,
            retry,
            recorder=self.recorder,
            claimer=self.claimer,
            heartbeat=self.heartbeat,
            listener=self.listener,
        )
        self.on_idle: Callable[[], None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        # SIGUSR1 prints every thread's stack to stderr, as Celery's worker does.
        if self.ledger.parent is not None:
            # Under a supervisor: it alone decides. A Ctrl-C reaches the whole process group:
            # the parent forwards it as SIGTERM. SIGHUP is the parent's (a new generation):
            # one sent to the whole group leaves this process running.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            watch_signals(self._on_signal, (signal.SIGTERM, *STACK_SIGNALS))
        else:
            watch_signals(self._on_signal, (signal.SIGTERM, signal.SIGINT, *STACK_SIGNALS))
        # The parent started this process with them blocked: what came while it started is
        # acted on now, by the handlers above.
        release_start_signals()

    def _on_signal(self, signum: int) -> None:
        """In the signal thread (``engine.interrupts``). SIGUSR1: every thread's stack on
        stderr. SIGTERM or SIGINT: finish the jobs in flight and stop; a second one alone exits
        at once. Under a supervisor, SIGTERMs after the first change nothing (the parent kills
        with SIGKILL when it means now)."""
        if signum in STACK_SIGNALS:
            print_stacks(f"worker {self.ledger.name}", self.jobs_by_thread())
            return
        if self.ledger.parent is None and self.ledger.stopping.is_set():
            logger.warning("Second signal: exiting now; unfinished jobs return after the lease.")
            os._exit(1)
        if self.ledger.parent is None:
            logger.info("Signal %s: finishing in-flight jobs, claiming no more.", signum)
        self.stop()

    def jobs_by_thread(self) -> dict[int, Job]:
        """The job each executor thread runs now, by the thread's ident (a stack dump's
        headings)."""
        ledger = self.ledger
        return {
            thread.ident: job
            for thread, job in zip(list(ledger.threads), list(ledger.held), strict=False)
            if job is not None and thread.ident is not None
        }

    def stop(self) -> None:
        self.ledger.stop()

    def recycle(self, why: str) -> None:
        """Finish the jobs in flight and exit with ``RECYCLE_EXIT``, to be replaced."""
        self.ledger.recycle(why)

    def run(self) -> int:
        """Work until stopped; return the process exit code."""
        ledger = self.ledger
        logger.info(
            "Worker %s: engine=%s concurrency=%s queues=%s",
            ledger.worker_id,
            ledger.engine,
            ledger.concurrency,
            ",".join(ledger.queues or []) or "*",
        )
        if ledger.parent is None:
            say_only_soft_limits(ledger.engine)
        # Before any thread connects: every connection of the worker gets them (the threads'
        # connections share the alias's settings).
        connections.close_all()
        bound_silent_network(ledger.store)
        if ledger.fleet_row:
            self.heartbeat.register_row()
        self.listener.read_paused()
        if ledger.parent is None:
            # A worker process under a supervisor leaves it to its keeper's first turn, just
            # after it is ready: a restart's slot is not held up by maintenance.
            self.keeper.rescue_now()
        if ledger.scheduler:
            self.keeper.ticker.run_once()
        self.keeper.start()
        deadlines()  # the time limits' timer, started with the other threads
        self.attempts.start()
        self.pool.start()
        self.listener.start()
        if ledger.parent is not None:
            ledger.parent.ready(ledger.worker_id)
        try:
            # The listener's thread starts with the others, but connects and listens once the
            # claim loop has what it wants: its connection and LISTEN do not delay the first
            # claim (a restarted child's, under a backlog). It wakes the loop as it starts, for
            # what was notified before.
            self.claimer.run(self.pool.supervise, caught_up=self.listener.begin)
        finally:
            self._shutdown()
        return RECYCLE_EXIT if ledger.recycled else 0

    def _shutdown(self) -> None:
        ledger = self.ledger
        ledger.stopping.set()
        ledger.claims_no_more()
        self.heartbeat.mark(WorkerState.STOPPING)
        self.claimer.hand_back_unstarted()
        self.pool.stop()
        self.keeper.stop()
        self.heartbeat.mark(WorkerState.STOPPED)
        connections.close_all()
        if ledger.parent is not None:
            ledger.parent.beat(0, ledger.processed)  # the last count, for the supervisor's total
        logger.info("Worker %s stopped after %s jobs.", ledger.worker_id, ledger.processed)

    # -- the services' methods by their former names ------------------------------------------
    # Tests call these on a worker (and the bench patches ``_execute``): each delegates to the
    # service that does the work now.

    def _execute(self, job: Job, slot: int) -> None:
        """Run ``job`` in executor slot ``slot``: what each executor thread calls per job."""
        self.attempts.execute(job, slot)

    def _read_paused(self) -> None:
        self.listener.read_paused()

    def _beat_row(self) -> None:
        self.heartbeat.beat_row()

    def _tick_schedules(self) -> float:
        return self.keeper.ticker.run_once()
