"""OS signals of ``runjobs``'s processes: acted on in a thread, never in the handler; SIGUSR1.

A Python signal handler runs in the main thread between two bytecodes, possibly inside a
``with lock:`` of the code it interrupted: ``threading.Event.wait`` holds its condition's lock
as it goes to sleep and as it wakes. A handler that takes that same lock (``Event.set`` does)
waits forever for its own thread: a worker that never stops on SIGTERM. So ``watch_signals``
has the interpreter's C handler write the signal's number to a pipe
(``signal.set_wakeup_fd``), the Python-level handler do nothing, and a thread of its own read
the pipe and act, outside any lock of the main thread. (The supervisor's handler only appends
to a deque, which takes no lock, and its loop reads the same kind of pipe.)

SIGUSR1 prints every thread's stack to stderr, as Celery's worker does: what an operator
reaches for when a worker seems stuck (``kill -USR1 PID``). Each process's block is headed
with its pid and its worker's name (the supervisor passes the signal on to its worker
processes, each of which prints its own block), and each executor thread's heading names the
job it runs now (id, kind, attempt). It is printed by that same thread
(or the supervisor's loop) from ``sys._current_frames()``, holding the GIL, and never by
faulthandler's C handler: that one reads the other threads' frames while they run, and a
thread that is busy in Python can free a frame under it (a segmentation fault, the worker
gone). A thread stuck in a lock or a blocking call lets go of the GIL, so it still answers.

A worker process is started with ``START_SIGNALS`` blocked (``signals_held`` around the fork or
the spawn: a new process inherits the mask, across ``exec`` too), and unblocks them only once
its handlers are in place (``release_start_signals``): a SIGUSR1 whose default action would
end it, or a SIGTERM, sent while it starts waits until it can be acted on instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ...printable import printable

if TYPE_CHECKING:
    from ...models import Job


def watch_signals(act: Callable[[int], None], signums: Iterable[int]) -> None:
    """Call ``act(signum)`` for each of ``signums`` received, in a daemon thread of its own.
    From the main thread (``signal.set_wakeup_fd`` needs it), once per process."""
    wanted = frozenset(signums)
    read_end, write_end = os.pipe()  # not inherited by the processes this one starts
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for signum in wanted:
        signal.signal(signum, _act_in_thread)

    def watch() -> None:
        while True:
            received = os.read(read_end, 64)
            for signum in received:
                if signum in wanted:
                    act(signum)

    threading.Thread(target=watch, name="jobs-signals", daemon=True).start()


def _act_in_thread(signum: int, frame: object) -> None:
    """The Python-level handler: nothing (the C handler has woken ``watch_signals``' thread);
    installed so that the signal does not take its default action."""


#: The signal that asks for ``print_stacks``: SIGUSR1 where the platform has it (not Windows).
STACK_SIGNALS: tuple[int, ...] = (signal.SIGUSR1,) if hasattr(signal, "SIGUSR1") else ()

#: The documented signals that may reach a worker process while it starts (a stack dump asked
#: of the whole fleet, a stop, a new generation): held until its handlers are installed.
START_SIGNALS: frozenset[int] = frozenset(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGUSR1") if hasattr(signal, name)
)


@contextmanager
def signals_held() -> Iterator[None]:
    """Block ``START_SIGNALS`` in this thread for the block: a process forked or spawned inside
    it starts with them blocked (pending, not lost) until ``release_start_signals``."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, START_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def release_start_signals() -> None:
    """Unblock ``START_SIGNALS`` (once this process's handlers are installed): the ones that
    arrived while it started are delivered now. A no-op in a process that never held them."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, START_SIGNALS)


def print_stacks(process: str = "", jobs: Mapping[int, Job] | None = None) -> None:
    """Every thread's stack on stderr, in one write, under a heading for this process:
    ``Process PID (PROCESS):`` (``process``: whose it is, e.g. ``worker web-1``). Then, most
    recent call first, in faulthandler's format with each thread's name and, for a thread of
    ``jobs`` (thread ident -> the job it runs now), that job: ``Thread 0x... (name) job 42
    (shop.invoice, attempt 1) (most recent call first):``, and a ``File`` line per frame."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    current = threading.get_ident()
    jobs = jobs or {}
    lines = [f"Process {os.getpid()}" + (f" ({printable(process)})" if process else "") + ":"]
    for ident, frame in sys._current_frames().items():
        which = "Current thread" if ident == current else "Thread"
        job = jobs.get(ident)
        running = f" job {job.pk} ({printable(job.kind)}, attempt {job.attempts})" if job else ""
        lines.append(
            f"{which} 0x{ident:016x} ({names.get(ident, '?')}){running} (most recent call first):"
        )
        frames = traceback.walk_stack(frame)  # from the most recent call back
        lines.extend(
            f'  File "{entry.filename}", line {entry.lineno} in {entry.name}'
            for entry in traceback.StackSummary.extract(frames, lookup_lines=False)
        )
        lines.append("")
    try:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed or broken stderr: nothing to print to
