"""SIGUSR1: every thread's stack, printed to stderr (``runjobs``: worker and supervisor).

What an operator reaches for when a worker seems stuck: ``kill -USR1 PID`` prints where each
of its threads is, as Celery's worker does. The handler is faulthandler's, written in C: it
prints even when every Python thread is stuck (a deadlock, a call that never returns), where
a Python-level handler would wait for the main thread to run it.
"""

from __future__ import annotations

import faulthandler
import io
import signal
import sys


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
