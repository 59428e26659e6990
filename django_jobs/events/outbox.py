"""From ``job_event`` to event rows: the receiver and the writer thread.

``job_event`` is sent after the change it describes has committed, so the row is written just
after the state change, not in its transaction: a process killed between the two loses that
event (the job row itself is right; a client that reconnects sees the job's current state).

``job.created`` is the exception: ``CreatedEventWriter`` stores it with the job (in the
enqueue's own statement or transaction), or just as the caller's transaction commits.

Other writes never run on the thread that published: the receiver copies the job's fields at once
(the job object changes afterwards) and hands the copy to one writer thread per process, which
makes the JSON, stores everything pending in one statement, then waits for more. A worker
recording a batch of outcomes, or an ``enqueue_many`` of a thousand jobs, costs one insert, not
one each, and the publishing thread pays a few microseconds per event.
When the writer cannot write (the database is away), it logs, keeps the events and tries
again; the jobs go on. The one exception: inside a transaction (a ``TestCase``, or
``run_until_idle()`` called in ``transaction.atomic()``) the row is written at once on that
transaction, so it commits, or rolls back, with it.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connections, transaction

from .. import clock
from ..conf import jobs_settings
from ..durations import parse_duration
from ..store import events as store
from ..store.base import BATCH_SHARED
from ..store.event_rows import NewEvent, StoredEvent
from .fanout import fleet, fleet_transports
from .payloads import event_text, owner_key, snapshot

if TYPE_CHECKING:
    from ..models import Job
    from ..store import NewJob

logger = logging.getLogger("django_jobs.events")

#: The writer closes its database connection after this long without events.
IDLE_CLOSE = 0.1
#: After a failed write, the writer waits this long before the next try.
RETRY_AFTER = 1.0
#: Events kept in memory while the database is away; the oldest are dropped past this.
MAX_PENDING = 10_000
#: How often a writer prunes event rows older than ``JOBS["EVENT_RETENTION"]``.
PRUNE_EVERY = 600.0


class Published(NamedTuple):
    """An event as published: the JSON is made from it by the writer thread. (A named tuple:
    made for every event, it must cost next to nothing.)"""

    type: str
    job: Job
    at: datetime
    line: str | None

    def to_row(self) -> NewEvent:
        data = event_text(self.type, self.job, self.at, self.line)
        return NewEvent(self.type, self.job.pk, owner_key(self.job.owner_id), data, self.at)


def on_job_event(sender: Any, **kwargs: Any) -> None:
    """The ``job_event`` receiver: store the event (it reaches clients from the row).

    It only copies the job's fields (a few microseconds); the JSON is made off this thread.
    """
    if kwargs.get("stored"):  # job.created: already stored with the jobs (CreatedEventWriter)
        return
    job = kwargs["job"]
    at = kwargs.get("at") or clock.now()
    writer.submit(Published(kwargs["type"], snapshot(job), at, kwargs.get("line")))


class CreatedEventWriter:
    """Stores ``job.created`` with the jobs it announces (``admission.CreatedEvents``).

    Only for an enqueue that runs its own short transaction: the write lock that keeps event
    ids in commit order is held until it commits. On PostgreSQL the job's insert statement
    writes the event too (an enqueue stays one round trip); it cannot know the job's id in
    advance, so it gets the event's text in two parts and puts the id between them.
    """

    def __init__(self) -> None:
        # The last template made: the rows of a batch differ only in their key (and payload,
        # which events leave out), so a batch makes one.
        self._last: tuple[tuple[Any, ...], str, str, str] | None = None

    def parts(self, row: NewJob) -> tuple[str, str]:
        shared = BATCH_SHARED(row)
        last = self._last
        if last is None or last[0] != shared:
            last = self._last = (shared, *self._template(row))
        _, head, before_key, after_key = last
        return head, before_key + json.dumps(row.idempotency_key) + after_key

    @staticmethod
    def _template(row: NewJob) -> tuple[str, str, str]:
        """The event's text cut at the job id and at the key's value.

        Made by ``event_text`` itself, with stand-ins for the id and the key that are then
        cut out: whatever fields the job JSON has, in whatever order, the template follows.
        """
        values = row.inserted(0)
        values["idempotency_key"] = _KEY_MARK
        job = SimpleNamespace(pk=_ID_MARK, **values)
        text = event_text("job.created", job, job.created_at)  # type: ignore[arg-type]
        head, found_id, rest = text.partition(json.dumps(_ID_MARK))
        before_key, found_key, after_key = rest.partition(json.dumps(_KEY_MARK))
        if not (found_id and found_key) or _ID_MARK in after_key or _KEY_MARK in after_key:
            raise AssertionError(f"Cannot cut the job.created text {text!r}")
        return head, before_key, after_key

    def store(self, alias: str, jobs: list[Job]) -> None:
        # In the admitting transaction (a savepoint): if the insert fails, the jobs stand and
        # their job.created goes the usual way, after the commit, through the writer.
        self._store(alias, jobs, ordered=True, when="with its jobs; it follows the commit")

    def stored(self, alias: str, events: list[StoredEvent]) -> None:
        if _fleet_publishes():
            _publish_fleet(events)

    def store_committed(self, alias: str, jobs: list[Job]) -> None:
        # Right after the caller's commit, in autocommit: one statement that takes the write
        # lock only for itself. (Inside a transaction still, as when a test runs on_commit
        # callbacks in its own, the lock would last until that ends: go unordered.)
        ordered = not connections[alias].in_atomic_block
        self._store(alias, jobs, ordered=ordered, when="after the commit; the writer retries")

    def _store(self, alias: str, jobs: list[Job], *, ordered: bool, when: str) -> None:
        """Store the jobs' job.created rows and mark the jobs; on failure log and leave them
        to the writer (``job_event`` then goes without ``stored``)."""
        rows = [
            # Admission sets created_at; the column allows NULL, hence the fallback.
            Published("job.created", job, job.created_at or clock.now(), None).to_row()
            for job in jobs
        ]
        fleet = _fleet_publishes()
        try:
            stored = store.insert(alias, rows, ordered=ordered, returning=fleet)
        except Exception:
            logger.warning("Cannot store job.created %s.", when, exc_info=True)
            return
        for job in jobs:
            job.__dict__["_created_event"] = True
        if fleet:  # published once committed (at once when the insert was its own commit)
            transaction.on_commit(lambda: _publish_fleet(stored), using=alias)


# Stand-ins for the id and the key in the job.created template: text no job JSON holds.
_ID_MARK = "<django_jobs: the job id>"
_KEY_MARK = "<django_jobs: the idempotency key>"


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


class EventWriter:
    """One thread per process that stores pending events in batches (see the module)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._pending: list[Published] = []
        self._busy = False
        self._thread: threading.Thread | None = None
        self._dropped = 0
        self._next_prune = 0.0
        self._failing = False

    def submit(self, event: Published) -> None:
        """Store ``event`` soon (at once, inside a transaction of the publishing thread)."""
        alias = jobs_settings.DATABASE
        if connections[alias].in_atomic_block:
            fleet = _fleet_publishes()
            rows = store.insert(alias, [event.to_row()], ordered=False, returning=fleet)
            if fleet:
                transaction.on_commit(lambda: _publish_fleet(rows), using=alias)
            return
        if self._pid != os.getpid():  # forked: the parent's thread and lock are not ours
            self._reset()
        with self._cond:
            self._pending.append(event)
            if len(self._pending) > MAX_PENDING:
                excess = len(self._pending) - MAX_PENDING
                del self._pending[:excess]
                self._dropped += excess
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="django_jobs-events-writer", daemon=True
                )
                self._thread.start()
                atexit.register(_flush_at_exit)
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every submitted event is stored; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._thread is None:
                    return False
                self._cond.notify_all()
                self._cond.wait(remaining)
        return True

    def _run(self) -> None:
        alias = jobs_settings.DATABASE
        connected = False
        while True:
            with self._cond:
                if not self._pending:
                    self._cond.wait(IDLE_CLOSE if connected else None)
                batch, self._pending = self._pending, []
                self._busy = bool(batch)
                dropped, self._dropped = self._dropped, 0
            if dropped:
                logger.error(
                    "Dropped %d live events: the database was unreachable and more than %d "
                    "were waiting. Jobs were not affected; clients should reload.",
                    dropped,
                    MAX_PENDING,
                )
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

    def _store(self, alias: str, batch: list[Published]) -> bool:
        """Store ``batch``; True when the connection is open afterwards."""
        rows: list[NewEvent] = []
        for event in batch:
            try:
                rows.append(event.to_row())
            except Exception:
                logger.exception(
                    "Job event %s of job %s cannot be made into JSON; it is dropped.",
                    event.type,
                    event.job.pk,
                )
        fleet = _fleet_publishes()
        try:
            stored = store.insert(alias, rows, returning=fleet)
        except Exception:
            self._failed(alias, batch)
            return False
        if self._failing:
            self._failing = False
            logger.warning("Live events are stored again.")
        if fleet:
            _publish_fleet(stored)
        self._maybe_prune(alias)
        return True

    def _failed(self, alias: str, batch: list[Published]) -> None:
        if not self._failing:
            self._failing = True
            logger.warning(
                "Cannot store %d live events; retrying every %.0fs. Jobs go on; check the "
                'database of JOBS["DATABASE"] = %r.',
                len(batch),
                RETRY_AFTER,
                alias,
                exc_info=True,
            )
        try:
            connections[alias].close()
        except Exception:
            logger.debug("Closing the events connection failed", exc_info=True)
        with self._cond:
            self._pending[:0] = batch
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


def _flush_at_exit() -> None:
    """A process that ends (``runjobs --burst``, a SIGTERM) stores, and publishes, its last
    events first."""
    writer.flush()
    fleet.flush()


def _fleet_publishes() -> bool:
    """Does this process publish the events it stores (a transport goes through Redis)?"""
    return bool(fleet_transports())


def _publish_fleet(rows: list[StoredEvent]) -> None:
    fleet.publish(rows)


writer = EventWriter()
