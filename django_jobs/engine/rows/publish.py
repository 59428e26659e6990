"""Job events, every type by one path: the event's row, then ``job_event``.

``event_row(type, job, at, line)`` is the one function that makes an event's row: its text is
``serialize.event_text``, the operator's JSON that the live streams send. Every event goes
through it, ``job.created`` included:

- ``job.created`` is stored with its job: the store's insert writes the job rows and their
  event rows together (``Store.insert_with_events`` gets ``created_row`` and calls it once it
  knows the ids), so a client never sees a job's ``job.started`` before its ``job.created``.
  Inside the caller's ``transaction.atomic()`` PostgreSQL stages the rows, and the caller's
  commit stores them (``store/staged_events.py``): taking the events' write lock
  (``store/events.py``) at the insert would hold it until the caller commits, and every
  writer would wait behind it. SQLite stores them just after the caller's commit
  (``publish_created``), in a transaction of their own.
- every other event is stored just after the change it describes has committed, by the
  writer thread (``EventWriter``): ``publish`` copies the job's fields at once (the job object
  changes afterwards) and hands the copy over; the thread makes the rows and stores everything
  pending in one statement. A worker recording a batch of outcomes, or an ``enqueue_many`` of a
  thousand jobs, costs one insert, not one each, and the publishing thread pays a few
  microseconds per event. A process killed between the change and the write loses that event
  (the job row itself is right; a client that reconnects sees the job's current state).
- in a worker process (``runjobs``) the worker's keeper thread stores them instead
  (``EventWriter.keep_by``): each event's row is made where it is published, and the keeper
  stores what is pending after each batch of outcomes it records, in one statement, with no
  thread of their own.

Rows that could not be stored (the database is away) go to the writer, which logs, keeps them
and tries again; the jobs go on. Inside a transaction of the publishing thread (a
``TestCase``, or ``run_until_idle()`` in ``transaction.atomic()``) a row is written at once on
that transaction, so it commits, or rolls back, with it.

Once rows are stored and committed, ``event_rows_stored`` (``signals.py``) is sent with them:
the live streams' fleet publisher listens (``events/outbox.py``). Then ``job_event`` is sent
for each event, after the change has committed; publishing never blocks or fails a job.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connections, transaction

from ... import clock
from ...conf import jobs_settings
from ...durations import parse_duration
from ...serialize import event_text
from ...signals import event_rows_stored, job_event
from ...states import JobState
from ...store import events as store
from ...store import staged_events
from ...store.event_rows import NewEvent, StoredEvent
from ...store.hints import database_hint

if TYPE_CHECKING:
    from ...models import Job

logger = logging.getLogger("django_jobs.events")

STATE_EVENTS: dict[str, str] = {
    JobState.RUNNING: "job.started",
    JobState.WAITING: "job.waiting",
    JobState.SUCCEEDED: "job.succeeded",
    JobState.FAILED: "job.failed",
    JobState.BLOCKED: "job.blocked",
    JobState.UNKNOWN: "job.blocked",
    JobState.CANCELLED: "job.cancelled",
    JobState.QUEUED: "job.retrying",
}

#: The writer closes its database connection after this long without events.
IDLE_CLOSE = 0.1
#: After a failed write, the writer waits this long before the next try.
RETRY_AFTER = 1.0
#: Events kept in memory while the database is away; the oldest are dropped past this.
MAX_PENDING = 10_000
#: How often a writer prunes event rows older than ``JOBS["EVENT_RETENTION"]``.
PRUNE_EVERY = 600.0


def event_row(event_type: str, job: Job, at: datetime, line: str | None = None) -> NewEvent:
    """The row of one event: its operator text (``serialize.event_text``), addressed to the
    job's owner (its pk as text) and operators."""
    owner = job.owner_id
    return NewEvent(
        event_type,
        job.pk,
        None if owner is None else str(owner),
        event_text(event_type, job, at, line),
        at,
    )


def created_row(job: Job) -> NewEvent:
    """The ``job.created`` row of a job just admitted (what the store's insert writes)."""
    # Admission sets created_at; the column allows NULL, hence the fallback.
    return event_row("job.created", job, job.created_at or clock.now())


class Published(NamedTuple):
    """An event waiting for its row: the row is made from it by the writer thread. (A named
    tuple: made for every event, it must cost next to nothing.)"""

    type: str
    job: Job
    at: datetime
    line: str | None

    def to_row(self) -> NewEvent:
        return event_row(self.type, self.job, self.at, self.line)


def snapshot(job: Job) -> Job:
    """A copy of ``job`` as it is now, cheap to take (its fields, not its related objects):
    the event's row is made from it later, off the publishing thread."""
    copy = type(job).__new__(type(job))
    copy.__dict__.update(job.__dict__)
    return copy


_storing = True


def storing_events() -> bool:
    """Are event rows stored (the live streams read them)? On unless turned off."""
    return _storing


def store_events(on: bool) -> bool:
    """Turn storing event rows on or off (``job_event`` is sent either way); return what it
    was. Off measures the engine alone (the bench's ``BENCH_LIVE_EVENTS=0``)."""
    global _storing
    previous, _storing = _storing, on
    return previous


def publish(
    event_type: str, job: Job, *, line: str | None = None, at: datetime | None = None
) -> None:
    """Store the event's row (soon, see the module) and send ``job_event`` now; never raises.

    ``at``: when it happened, if not now (``job.started``: the attempt's ``started_at``)."""
    at = at or clock.now()
    if _storing:
        if writer.kept:
            writer.submit_row(event_type, job, at, line)
        else:
            writer.submit(Published(event_type, snapshot(job), at, line))
    announce(event_type, job, at, line=line)


def announce(event_type: str, job: Job, at: datetime, **extra: Any) -> None:
    """Send ``job_event`` now; a failing receiver is logged, never raised."""
    if not job_event.receivers:
        return
    for receiver, response in job_event.send_robust(
        sender=type(job), type=event_type, job=job, at=at, **extra
    ):
        if isinstance(response, Exception):
            logger.error(
                "A job_event receiver %r failed on %s for job %s",
                receiver,
                event_type,
                job.pk,
                exc_info=response,
            )


def publish_after_commit(event_type: str, job: Job, *, alias: str) -> None:
    if _storing or job_event.receivers:
        transaction.on_commit(lambda: publish(event_type, job), using=alias)


def publish_created(jobs: list[Job], *, alias: str, written: Sequence[StoredEvent] | None) -> None:
    """``job.created`` of ``jobs``, once the admitting transaction commits: ``written``, the
    rows the insert wrote with the jobs, are handed on; without them (``None``: SQLite inside
    the caller's transaction, PostgreSQL there before its staging table exists, or the insert
    could not write them) the rows are stored then, in autocommit. Then ``job_event`` for
    each job."""
    if not (_storing or job_event.receivers):
        return

    def after_commit() -> None:
        if written is not None:
            staged_events.settle(written)
            rows_stored(written)
        elif _storing:
            store_now(
                alias,
                [
                    Published("job.created", job, job.created_at or clock.now(), None)
                    for job in jobs
                ],
            )
        at = clock.now()
        for job in jobs:
            announce("job.created", job, at)

    transaction.on_commit(after_commit, using=alias)


def store_now(alias: str, events: list[Published]) -> None:
    """Store ``events`` at once, outside any transaction (the write lock then lasts one
    statement); if that fails, the writer keeps them and tries again. Never raises."""
    # Inside a transaction still (a test running on_commit callbacks in its own), the lock
    # would last until that ends: go unordered.
    ordered = not connections[alias].in_atomic_block
    try:
        stored = store.insert(alias, [event.to_row() for event in events], ordered=ordered)
    except Exception:
        logger.warning("Cannot store job.created now; the writer retries.", exc_info=True)
        writer.submit_all(events)
        return
    rows_stored(stored)


def rows_stored(rows: Sequence[StoredEvent]) -> None:
    """``event_rows_stored`` for rows stored and committed (the fleet publisher listens).
    Rows a commit stored from staging are read only if a receiver looks at them."""
    if isinstance(rows, list) and not rows:
        return
    if event_rows_stored.receivers:
        for receiver, response in event_rows_stored.send_robust(sender=StoredEvent, rows=rows):
            if isinstance(response, Exception):
                logger.error("An event_rows_stored receiver %r failed", receiver, exc_info=response)


def retention() -> timedelta | None:
    """How long event rows are kept (``JOBS["EVENT_RETENTION"]``, default one day)."""
    value = jobs_settings.EVENT_RETENTION
    if value is None:
        return None
    return parse_duration(value, name='JOBS["EVENT_RETENTION"]')


def prune_events(older_than: Any = None, *, alias: str | None = None) -> int:
    """Delete event rows older than ``older_than`` (default ``JOBS["EVENT_RETENTION"]``).

    Returns how many were deleted. A client whose ``Last-Event-ID`` points at a pruned event
    gets a ``stream-reset`` event instead of a replay: it should reload the jobs it shows.
    """
    keep = retention() if older_than is None else parse_duration(older_than, name="older_than")
    if keep is None:
        return 0
    return store.prune(alias or jobs_settings.DATABASE, clock.now() - keep)


Pending = Published | NewEvent


class EventWriter:
    """One thread per process that stores pending events in batches (see the module); or,
    while a worker runs, that worker's keeper thread (``keep_by``)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._pending: list[Pending] = []
        self._busy = False
        self._thread: threading.Thread | None = None
        self._dropped = 0
        # The first prune at a moment drawn within ``PRUNE_EVERY``, not at the first write: a
        # worker process that lives a few jobs (``--max-jobs-per-child``) does not spend its
        # start on a bisection of the event table, and processes that each live a short while
        # still prune, together, about once a ``PRUNE_EVERY`` as one long-lived process does.
        self._next_prune = time.monotonic() + random.uniform(0.0, PRUNE_EVERY)
        self._failing = False
        self._retry_at = 0.0
        # The wake-up calls of the keepers that store this process's events (``keep_by``).
        self._keepers: list[Callable[[], None]] = []

    @property
    def kept(self) -> bool:
        """Does a worker's keeper store this process's events (``keep_by``)?"""
        return bool(self._keepers)

    def keep_by(self, wake: Callable[[], None]) -> None:
        """From now on a worker's keeper thread stores the pending events: ``wake`` is called
        when events arrive, and the keeper calls ``store_pending``.

        Why (measured with py-spy on ``runjobs --burst``, no-op jobs, live events on): the
        writer thread was a fourth thread contending for the GIL beside the claim loop, the
        executor and the keeper, and every event paid a copy of its job and a condition
        notify so that its text could be made on that thread. The keeper already wakes for
        every batch of outcomes; its ``job.started`` and ``job.succeeded`` rows are made
        where they are published and stored in one statement per batch, with no thread of
        their own.
        """
        with self._cond:
            self._keepers.append(wake)
            pending = bool(self._pending)
        if pending:
            wake()

    def kept_no_more(self, wake: Callable[[], None]) -> None:
        """The keeper of ``wake`` stops storing events; what it could not store goes to the
        writer thread (which retries until the database is back)."""
        with self._cond:
            if wake in self._keepers:
                self._keepers.remove(wake)
            if self._pending and not self._keepers and self._thread is None:
                self._start_thread()
            self._cond.notify_all()

    def submit(self, event: Pending) -> None:
        """Store ``event`` soon (at once, inside a transaction of the publishing thread)."""
        alias = jobs_settings.DATABASE
        if connections[alias].in_atomic_block:
            row = event if isinstance(event, NewEvent) else event.to_row()
            rows = store.insert(alias, [row], ordered=False)
            transaction.on_commit(lambda: rows_stored(rows), using=alias)
            return
        self.submit_all([event])

    def submit_row(self, event_type: str, job: Job, at: datetime, line: str | None) -> None:
        """Where a keeper stores the events (``kept``): the event's row is made now, on the
        publishing thread (no copy of the job to make it from later)."""
        try:
            row = event_row(event_type, job, at, line)
        except Exception:
            logger.exception(
                "Job event %s of job %s cannot be made into JSON; it is dropped.",
                event_type,
                job.pk,
            )
            return
        self.submit(row)

    def submit_all(self, events: Sequence[Pending]) -> None:
        """Store ``events`` soon, from the writer thread (or a worker's keeper)."""
        with self._cond:
            self._pending += events
            if len(self._pending) > MAX_PENDING:
                excess = len(self._pending) - MAX_PENDING
                del self._pending[:excess]
                self._dropped += excess
            keepers = self._keepers
            if not keepers:
                if self._thread is None:
                    self._start_thread()
                self._cond.notify_all()
        if keepers:
            keepers[0]()

    def store_pending(self) -> None:
        """Store the pending events now, on the calling thread (a worker's keeper): one
        statement. After a failure the events stay pending and the next call before
        ``RETRY_AFTER`` has passed does nothing; it never raises or waits."""
        if time.monotonic() < self._retry_at:
            return
        with self._cond:
            if self._busy or not self._pending:
                return
            batch, self._pending = self._pending, []
            self._busy = True
        self._report_dropped()
        try:
            if not self._store(jobs_settings.DATABASE, batch, wait=False):
                self._retry_at = time.monotonic() + RETRY_AFTER
        except Exception:
            logger.exception("Storing live events failed; they are dropped.")
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _start_thread(self) -> None:
        """Start the writer thread (with ``_cond`` held). When the system refuses a thread
        (``can't start new thread``: no memory for its stack, or no threads left) the events
        stay pending and the next submit tries again: publishing never fails a job."""
        thread = threading.Thread(target=self._run, name="django_jobs-events-writer", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:
            logger.error(
                "Cannot start the events writer thread (%s); %s event(s) wait for the next try.",
                exc,
                len(self._pending),
            )
            return
        self._thread = thread
        atexit.register(self.flush)  # a process that ends stores its last events

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every submitted event is stored; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self._thread is None and not self._keepers):
                    return False
                self._cond.notify_all()
                self._cond.wait(remaining)
        return True

    def _run(self) -> None:
        alias = jobs_settings.DATABASE
        connected = False
        while True:
            with self._cond:
                if not self._pending or self._keepers:
                    self._cond.wait(IDLE_CLOSE if connected else None)
                batch = []
                # While a keeper stores the events, it alone takes them: two writers could
                # commit their batches out of order.
                if not (self._keepers or self._busy):
                    batch, self._pending = self._pending, []
                    self._busy = bool(batch)
            self._report_dropped()
            if not batch:
                if connected:
                    connections[alias].close()  # idle: hold no connection
                    connected = False
                continue
            try:
                connected = self._store(alias, batch)
            except Exception:  # never let the thread die: the next events must be stored
                logger.exception("Storing live events failed; they are dropped.")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _report_dropped(self) -> None:
        with self._cond:
            dropped, self._dropped = self._dropped, 0
        if dropped:
            logger.error(
                "Dropped %d live events: the database was unreachable and more than %d "
                "were waiting. Jobs were not affected; clients should reload.",
                dropped,
                MAX_PENDING,
            )

    def _store(self, alias: str, batch: list[Pending], *, wait: bool = True) -> bool:
        """Store ``batch``; True when the connection is open afterwards. ``wait``: after a
        failure, wait ``RETRY_AFTER`` (the writer thread) or return at once (a keeper)."""
        rows: list[NewEvent] = []
        for event in batch:
            if isinstance(event, NewEvent):
                rows.append(event)
                continue
            try:
                rows.append(event.to_row())
            except Exception:
                logger.exception(
                    "Job event %s of job %s cannot be made into JSON; it is dropped.",
                    event.type,
                    event.job.pk,
                )
        try:
            stored = store.insert(alias, rows)
        except Exception as exc:
            self._failed(alias, batch, exc, wait=wait)
            return False
        if self._failing:
            self._failing = False
            logger.warning("Live events are stored again.")
        rows_stored(stored)
        self._maybe_prune(alias)
        return True

    def _failed(
        self, alias: str, batch: list[Pending], exc: Exception, *, wait: bool = True
    ) -> None:
        if not self._failing:
            self._failing = True
            logger.warning(
                "Cannot store %d live events; retrying every %.0fs. Jobs go on; check the "
                'database of JOBS["DATABASE"] = %r. %s',
                len(batch),
                RETRY_AFTER,
                alias,
                database_hint(exc),
                exc_info=True,
            )
        try:
            connections[alias].close()
        except Exception:
            logger.debug("Closing the events connection failed", exc_info=True)
        with self._cond:
            self._pending[:0] = batch
        if wait:
            time.sleep(RETRY_AFTER)

    def _maybe_prune(self, alias: str) -> None:
        now = time.monotonic()
        if now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY
        try:
            prune_events(alias=alias)
        except Exception:
            logger.warning("Pruning old live events failed; trying again later.", exc_info=True)


writer = EventWriter()
# A forked process starts with no thread, lock, events or keepers of its parent's, at the fork
# itself: a check at the first event instead (as it once was) also forgot the keeper that the
# child's worker had registered before that event, and the child's events then went through
# a writer thread of their own, reconnecting as it idled (measured: durable steps drained at
# less than half their rate in the processes a template forks).
os.register_at_fork(after_in_child=writer._reset)
