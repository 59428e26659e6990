"""Time limits that stop a running body: ``JobTimeout`` raised in the runner's own thread.

A plain ``def`` runner cannot be stopped from outside by Python code, only asked. CPython can
set an exception for another thread to raise at its next Python instruction
(``PyThreadState_SetAsyncExc``): the runner's ``finally`` blocks, ``except JobTimeout`` and
``step.atomic`` rollbacks run as for any exception, and the code after the limit never runs.
A thread blocked in one C call (a ``select`` without a timeout, a driver waiting on a socket)
gets it only when the call returns: that is what the hard limit's process end is for
(``engine.supervisor``).

Delivered by one timer thread per process, from a heap of deadlines (not a thread per job),
and race-free: each body has a ``Guard`` whose lock the timer holds while it delivers, and
which the body's thread closes as the body returns. A closed guard is never delivered to; and
an exception delivered but not raised yet when the body returned is taken back
(``SetAsyncExc(thread, NULL)``) before the thread leaves the guard, so it never lands in the
engine's own code, nor in the thread's next job.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

from ...exceptions import JobTimeout

logger = logging.getLogger("django_jobs.worker")

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int

#: Compact the heap once this many of its entries belong to bodies that returned already.
_COMPACT_AT = 1024

Action = Callable[[], None]


def timeout_class(message: str, base: type[JobTimeout] = JobTimeout) -> type[JobTimeout]:
    """A subclass of ``base`` (``JobTimeout``, or the kind's own subclass of it) whose instances
    carry ``message``: the thread raising an asynchronous exception instantiates its class with
    no arguments."""

    def carry(self: JobTimeout) -> None:
        JobTimeout.__init__(self, message)

    return type(base.__name__, (base,), {"__init__": carry, "__module__": base.__module__})


class Guard:
    """The body a thread runs, as the timer sees it: one per thread, reused body after body
    (``begin`` starts the next one's watch and returns its token), so each entry of the timer
    names the body it was for and never reaches a later one."""

    __slots__ = ("closed", "delivered", "lock", "thread_id", "token")

    def __init__(self) -> None:
        self.thread_id = threading.get_ident()
        self.lock = threading.Lock()
        self.closed = True
        self.delivered = False
        self.token = 0

    def begin(self) -> int:
        """A new body starts in this thread: what the timer may interrupt until ``close``.

        No lock: the timer checks ``closed`` and then ``token`` under the guard's lock, and
        the token changes first, so an entry of the body before never matches the new one."""
        self.delivered = False
        self.token += 1
        self.closed = False
        return self.token

    def watching(self, token: int) -> bool:
        """The body ``token`` names is still running (a hint: ``interrupt`` decides)."""
        return not self.closed and self.token == token

    def interrupt(
        self, token: int, exc_class: type[BaseException] | None, first: Action | None = None
    ) -> bool:
        """From the timer: unless the body ``token`` names returned, call ``first()`` and
        raise ``exc_class`` in the body's thread (None: nothing raised). True if that body
        was still running."""
        # Never waits long on a body's thread: one that was interrupted inside ``close`` may
        # have left the lock taken (the timer then passes over it).
        if not self.lock.acquire(timeout=1.0):
            return False
        try:
            if self.closed or self.token != token:
                return False
            if first is not None:
                first()  # under the lock: the body's thread reads it after ``close``
            if exc_class is not None:
                _set_async_exc(self.thread_id, ctypes.py_object(exc_class))
                self.delivered = True
            return True
        finally:
            self.lock.release()

    def close(self) -> None:
        """In the body's thread, as the body returns or raises: no delivery from now on, and
        one delivered but not raised yet is taken back. An exception that lands while this
        runs (the limit passed as the body returned) is raised after, as the body's own."""
        landed: BaseException | None = None
        while True:
            try:
                with self.lock:
                    self.closed = True
                    if self.delivered:
                        _set_async_exc(self.thread_id, ctypes.py_object())  # NULL: take back
                break
            except BaseException as exc:  # only an asynchronous exception lands here
                landed = exc
        if landed is not None:
            raise landed


_local = threading.local()


def thread_guard() -> Guard:
    """The calling thread's guard (made on first use)."""
    guard: Guard | None = getattr(_local, "guard", None)
    if guard is None:
        guard = _local.guard = Guard()
    return guard


class Deadlines:
    """The timer thread and its heap of (monotonic deadline, action). Adding an entry takes
    one plain lock (the hot path: every job with a limit); the timer is woken only when the
    entry is the earliest."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Guard, int, Action]] = []
        self.lock = threading.Lock()
        self.wakeup = threading.Event()
        self.order = itertools.count()
        self.pid = os.getpid()
        self.stale = 0  # entries whose body returned, still in the heap
        self.thread = threading.Thread(target=self._run, name="jobs-deadlines", daemon=True)
        self.thread.start()

    def at(self, when: float, guard: Guard, token: int, action: Action) -> None:
        """Call ``action()`` in the timer thread at ``when`` (``time.monotonic()``'s clock),
        unless the body ``token`` names returned by then."""
        entry = (when, next(self.order), guard, token, action)
        with self.lock:
            if self.stale > _COMPACT_AT and self.stale * 2 > len(self.heap):
                self.heap = [e for e in self.heap if e[2].watching(e[3])]
                heapq.heapify(self.heap)
                self.stale = 0
            heapq.heappush(self.heap, entry)
            earliest = self.heap[0] is entry
        if earliest:
            self.wakeup.set()

    def returned(self, entries: int = 1) -> None:
        """A body with ``entries`` in the heap returned: they stay until compacted or due (a
        count, no search)."""
        self.stale += entries

    def _run(self) -> None:
        while True:
            due = []
            with self.lock:
                now = time.monotonic()
                while self.heap and self.heap[0][0] <= now:
                    due.append(heapq.heappop(self.heap))
                wait = self.heap[0][0] - now if self.heap else None
            for _, _, guard, token, action in due:
                if not guard.watching(token):
                    continue
                try:
                    action()
                except Exception:  # a failed delivery must never stop the timer
                    logger.exception("A time limit's action failed; the timer goes on.")
            if due:
                continue  # an action may have added an entry due now
            self.wakeup.wait(wait)
            self.wakeup.clear()  # the heap is read again after: an entry added meanwhile is seen


_deadlines: Deadlines | None = None
_start_lock = threading.Lock()


def deadlines() -> Deadlines:
    """This process's timer (started on first use; again in a forked process)."""
    global _deadlines
    timer = _deadlines
    if timer is None or timer.pid != os.getpid():
        with _start_lock:
            timer = _deadlines
            if timer is None or timer.pid != os.getpid():
                timer = _deadlines = Deadlines()
    return timer
