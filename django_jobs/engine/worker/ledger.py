"""What the services of one worker share: who it is, and the jobs it holds from claim to record.

One ``Ledger`` per ``Worker``. The claim loop, the executor threads, the keeper and the listener
read and change it; the counts that several threads change together change under
``running_lock``. Its two events are the worker's pulse: ``stopping`` (claim no more, finish)
and ``wake`` (the claim loop looks again now).
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar, cast, overload

from ... import clock
from ...models import Job
from ...store import Outcome, Store
from ..run.context import LiveState
from .child import ParentChannel

logger = logging.getLogger("django_jobs.worker")

#: Put on the local queue once per executor thread: that thread ends.
STOP: Any = object()
RECORD_BATCH = 500  # outcomes written per statement at most

T = TypeVar("T")


@dataclass(eq=False, kw_only=True)
class Ledger:
    """One worker's identity, its settings of the moment, and the jobs it holds."""

    engine: str
    #: Its row's name (``--name``, default ``host:pid``); ``fleet_row=False``: no row (a
    #: process whose parent writes the row for it).
    name: str
    fleet_row: bool
    worker_id: str
    queues: list[str] | None
    concurrency: int
    burst: bool
    scheduler: bool
    alias: str
    store: Store
    lease: timedelta
    poll: float
    max_prefetch: int
    #: Under a supervisor: the pipe to it (``engine.child``), and the limits after which
    #: this process finishes to be replaced (jobs started; resident bytes after a job).
    parent: ParentChannel | None
    max_jobs: int | None
    max_memory: int | None

    #: When this worker started (its process's ``started_at`` in the row's
    #: ``processes_detail``).
    started_at: datetime = field(default_factory=clock.now)
    stopping: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    # SimpleQueue: a put or get in C, no Python-level Condition per job.
    local: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    outcomes: queue.SimpleQueue[Outcome] = field(default_factory=queue.SimpleQueue)
    running: dict[int, tuple[Job, LiveState]] = field(default_factory=dict)
    running_lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0  # claimed and not yet recorded
    unfinished: int = 0  # claimed and not yet run to an outcome
    refill_at: int = 0  # the claim loop wants waking once unfinished drops to this
    claimed_total: int = 0
    avg_duration: float = 0.0
    processed: int = 0
    #: The queues of this engine that are paused: the claim passes over them. Read at
    #: start, again on each ``notify_paused`` (PostgreSQL), and at least twice a second.
    paused: frozenset[str] = frozenset()
    # Per executor slot: its thread, the job it is running, and when that job started
    # (monotonic).
    threads: list[threading.Thread] = field(default_factory=list)
    held: list[Job | None] = field(default_factory=list)
    held_since: list[float] = field(default_factory=list)
    # Threads left to a runner that ran past its timeout and would not stop (see
    # ``ExecutorPool._abandon_if_hung``): whatever they return later is dropped.
    abandoned: set[threading.Thread] = field(default_factory=set)
    #: Threads whose job was stopped at its hard limit and that have not unwound yet
    #: (blocked in a C call): shutting down does not wait for them.
    stuck: set[threading.Thread] = field(default_factory=set)
    recycled: bool = False
    replacement_asked: bool = False

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def wake_claims(self) -> None:
        """Wake the claim loop (jobs became due): ``wake`` read now, whatever replaced it."""
        self.wake.set()

    def recycle(self, why: str) -> None:
        """Finish the jobs in flight and exit with ``RECYCLE_EXIT``, to be replaced."""
        if not self.recycled:
            self.recycled = True
            logger.info("Worker %s: %s; finishing to be replaced.", self.worker_id, why)
            self.ask_replacement()
            self.stop()

    def ask_replacement(self) -> None:
        """Under a supervisor: this process claims no more, so its replacement may start now
        and be ready when this one exits (``ParentChannel.retiring``). Said once."""
        if self.parent is not None and not self.replacement_asked:
            self.replacement_asked = True
            self.parent.retiring()

    def claims_no_more(self) -> None:
        """Under a supervisor: this process makes no more claims; the next child of its slot,
        held at its gate until now, may claim (``ParentChannel.claims_no_more``)."""
        if self.parent is not None:
            self.parent.claims_no_more()

    def jobs_running(self) -> int:
        return sum(1 for job in self.held if job is not None)

    def forget(self, job_ids: list[int]) -> None:
        """Claimed jobs given back unstarted: no longer held, nothing to record. Under
        ``running_lock``, held by the caller."""
        self.in_flight -= len(job_ids)
        self.unfinished -= len(job_ids)
        for job_id in job_ids:
            self.running.pop(job_id, None)


class Shared(Generic[T]):
    """An attribute of the worker kept in its ledger: read and written there, so that the
    services and whoever holds the worker (``runjobs``, tests, the bench) see one value."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Shared[T]: ...

    @overload
    def __get__(self, obj: object, owner: type[Any]) -> T: ...

    def __get__(self, obj: object | None, owner: type[Any]) -> Shared[T] | T:
        if obj is None:
            return self
        return cast(T, getattr(cast(Any, obj).ledger, self.name))

    def __set__(self, obj: object, value: T) -> None:
        setattr(cast(Any, obj).ledger, self.name, value)
