"""What a worker process running under a supervisor (``engine.supervisor``) tells its parent.

One pipe per child, written by the child, read by the parent, one short line per message (a
write under ``PIPE_BUF`` bytes is atomic, so the child's threads share it without a lock):

- ``READY <worker_id>``: the child is set up and claims from now on (the start-up handshake);
- ``S <job_id>``: a job's runner is about to be called (its attempt started); ``S <job_id>
  <seconds>`` for a job with a hard time limit of that many seconds;
- ``U <job_id>``: the thread of a job with a hard limit is done with it (it returned, raised or
  unwound from the limit's ``JobTimeout``);
- ``R <job_id> ...``: the outcomes of these started jobs are recorded (they are no longer the
  child's);
- ``B <running> <done> <rss>``: a heartbeat, with the jobs running and done and the resident
  memory in bytes, at the lease's cadence (the worker's row lists each process with them);
- ``Q``: the child is about to finish (``--max-jobs-per-child`` has no more than a thread's
  worth of jobs left to claim, or its memory is over ``--max-memory-per-child``) and exits once
  its jobs end: the parent starts its replacement now, so the new child is ready by then
  instead of starting after the exit;
- ``D``: the child claims no more (its last claim is made, or it stops).

The other way, one pipe per child too, the gate: the child claims nothing until its read end
is at end of file (``ParentChannel.wait_gate``). The parent closes its write end at once, or,
for the replacement of a child that is finishing (``Q``), once that child's ``D`` is heard or
it exited: two children of a slot never claim at once, so the new one's first claim does not
take what the old one still meant to take, nor claim ahead of jobs that then wait behind the
old one's last (handed back and claimed again around each recycle). A parent that dies ends
the gate too.

``S`` and ``R`` let the parent tell, when a child dies, a job that started (its attempt may be
lost: ``WORKER_LOST``) from one claimed ahead and never started (queued again, uncounted): the
``S`` is written before the runner is called, and a pipe keeps what was written after its
writer died. ``S`` with a limit and ``U`` let it end a child whose job's thread did not unwind
at its hard limit (blocked in a C call); the heartbeat carries the counts for the workers view.

``resident_memory`` is the process's current resident set (not its peak, ``ru_maxrss``, which
never comes down), for ``--max-memory-per-child``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import select
import signal
import sys
import threading

logger = logging.getLogger("django_jobs.worker")

#: A child's exit code when it finished to be replaced (``--max-jobs-per-child``,
#: ``--max-memory-per-child``): the parent starts a new one at once, without backoff.
RECYCLE_EXIT = 3
#: Job ids per ``R`` line: ids of up to 19 digits and their spaces stay under ``PIPE_BUF``
#: (4096 bytes on Linux; 512 at least, by POSIX).
RECORDED_PER_LINE = max((getattr(select, "PIPE_BUF", 512) - 4) // 20, 1)


class ParentChannel:
    """The child's end of its pipe to the supervisor."""

    def __init__(self, fd: int, gate: int | None = None) -> None:
        self.fd = fd
        self.gate = gate
        self.broken = False
        self.claiming = True
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

    def started(self, job_id: int, hard_limit_s: float | None = None) -> None:
        self._send(f"S {job_id}" if hard_limit_s is None else f"S {job_id} {hard_limit_s:.3f}")

    def unwound(self, job_id: int) -> None:
        self._send(f"U {job_id}")

    def recorded(self, job_ids: list[int]) -> None:
        # Lines under PIPE_BUF, so each stays whole beside the other threads' writes.
        for at in range(0, len(job_ids), RECORDED_PER_LINE):
            self._send("R " + " ".join(map(str, job_ids[at : at + RECORDED_PER_LINE])))

    def beat(self, running: int, done: int, rss: int | None = None) -> None:
        self._send(f"B {running} {done}" if rss is None else f"B {running} {done} {rss}")

    def retiring(self) -> None:
        self._send("Q")

    def claims_no_more(self) -> None:
        """``D``, said once: the slot's next child may claim from now on."""
        if self.claiming:
            self.claiming = False
            self._send("D")

    def wait_gate(self, stopping: threading.Event) -> None:
        """Until the parent opens the gate (its end closed: end of file here), or ``stopping``
        is set. Once: the gate's descriptor is closed after."""
        if self.gate is None:
            return
        try:
            while not stopping.is_set():
                readable, _, _ = select.select([self.gate], [], [], 0.1)
                if readable:
                    break
        except (OSError, ValueError):
            pass  # a gate that cannot be read holds nothing back
        finally:
            os.close(self.gate)
            self.gate = None


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
