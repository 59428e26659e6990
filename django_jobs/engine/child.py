"""What a worker process running under a supervisor (``engine.supervisor``) tells its parent.

One pipe per child, written by the child, read by the parent, one short line per message (a
write under ``PIPE_BUF`` bytes is atomic, so the child's threads share it without a lock):

- ``READY <worker_id>``: the child is set up and claims from now on (the start-up handshake);
- ``S <job_id> <seconds>``: a job with a hard time limit of that many seconds started;
- ``E <job_id>``: that job ended (whatever its outcome);
- ``B <running> <done>``: a heartbeat, with the jobs running and done, at the lease's cadence.

Only jobs with a hard limit cost a message each: the parent needs them to end a child whose job
runs past its limit; the heartbeat carries the counts for the workers view.

``resident_memory`` is the process's current resident set (not its peak, ``ru_maxrss``, which
never comes down), for ``--max-memory-per-child``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import signal
import sys

logger = logging.getLogger("django_jobs.worker")

#: A child's exit code when it finished to be replaced (``--max-jobs-per-child``,
#: ``--max-memory-per-child``): the parent starts a new one at once, without backoff.
RECYCLE_EXIT = 3


class ParentChannel:
    """The child's end of its pipe to the supervisor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.broken = False
        self.parent_pid = os.getppid()
        _terminate_with_parent()

    @property
    def orphaned(self) -> bool:
        """The parent is gone (killed with SIGKILL): the child finishes and exits."""
        return self.broken or os.getppid() != self.parent_pid

    def _send(self, line: str) -> None:
        if self.broken:
            return
        try:
            os.write(self.fd, line.encode() + b"\n")
        except OSError:
            # The parent is gone: the child goes on with its in-flight work; the lease
            # covers the rest, as for a worker without a supervisor.
            self.broken = True

    def ready(self, worker_id: str) -> None:
        self._send(f"READY {worker_id}")

    def started(self, job_id: int, hard_limit_s: float) -> None:
        self._send(f"S {job_id} {hard_limit_s:.3f}")

    def ended(self, job_id: int) -> None:
        self._send(f"E {job_id}")

    def beat(self, running: int, done: int) -> None:
        self._send(f"B {running} {done}")


def resident_memory() -> int:
    """This process's resident memory in bytes, now (Linux: ``/proc/self/statm``).

    Elsewhere, the peak (``ru_maxrss``) is the best the standard library offers: a child over
    the limit once is then replaced after each job until a new one starts, which errs on the
    safe side.
    """
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB else


def _terminate_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies (``PR_SET_PDEATHSIG``), so a
    supervisor killed with SIGKILL leaves no worker behind; each finishes its in-flight jobs
    and exits. Elsewhere the heartbeat notices (``ParentChannel.orphaned``)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        logger.debug("prctl(PR_SET_PDEATHSIG) is not available here.")
