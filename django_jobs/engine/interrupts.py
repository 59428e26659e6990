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
reaches for when a worker seems stuck (``kill -USR1 PID``). The handler is faulthandler's,
written in C: it prints even when every Python thread is stuck, as in the case above.
"""

from __future__ import annotations

import faulthandler
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable


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


def install_stack_dump(*, chain: bool = False) -> bool:
    """Print every thread's stack to stderr on SIGUSR1. ``chain``: the Python-level handler
    set before this one runs too (the supervisor's, which passes the signal on to its worker
    processes). False where it cannot be installed: no SIGUSR1 (Windows), or a stderr without
    a file descriptor (a captured stream)."""
    signum = getattr(signal, "SIGUSR1", None)
    if signum is None:
        return False
    try:
        faulthandler.register(signum, file=sys.stderr, all_threads=True, chain=chain)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False
    return True


def remove_stack_dump() -> None:
    """Undo ``install_stack_dump``: SIGUSR1's handler before it is back."""
    signum = getattr(signal, "SIGUSR1", None)
    if signum is not None:
        faulthandler.unregister(signum)
