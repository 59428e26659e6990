"""The supervisor's side of the templates (``engine.template``): one per generation, each asked
to fork the worker processes of its generation.

``Template`` is the supervisor's view of one: its process (a child of the supervisor, started
as a new interpreter), its end of the socket pair, the request in flight, and the worker
processes it forked. ``ForkedProcess`` is what the supervisor holds of one of those: a pid it
can signal, and an exit code the template reports when it reaps the process.

Reaping: a forked worker process is the template's child, not the supervisor's, so the template
reaps it and says so (``X pid code``), after forkserver's way in the standard library. When the
template itself dies first, its children get SIGTERM (``PR_SET_PDEATHSIG``: they finish their
jobs and exit) and, on Linux, are handed to the supervisor, which is their subreaper
(``become_subreaper``): it reaps them by pid and reads their real exit codes. Elsewhere a child
of a dead template is taken for gone once its pid is (``LOST_EXIT``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .interrupts import signals_held

logger = logging.getLogger("django_jobs.worker")

#: The exit code given to a worker process whose exit nobody could read (its template died
#: first, where the supervisor cannot be a subreaper): taken as a death, never as clean.
LOST_EXIT = 255


def become_subreaper() -> bool:
    """Linux: this process adopts its descendants orphaned by their parent's death
    (``PR_SET_CHILD_SUBREAPER``), so it can reap the worker processes of a template that died
    and read how they ended. False where that does not exist."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def can_fork() -> bool:
    """Templates need ``fork`` and passing a descriptor over a socket."""
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX")


class ForkedProcess:
    """A worker process forked by a template, as the supervisor's ``Child.process``: the same
    three members as a ``subprocess.Popen`` it uses (``pid``, ``poll``, ``send_signal``)."""

    def __init__(self, pid: int, template: Template) -> None:
        self.pid = pid
        self.template = template
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.template.gone:
            self.returncode = _reap_orphan(self.pid)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)


def _reap_orphan(pid: int) -> int | None:
    """The exit code of a worker process whose template died, or None while it runs."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        # Not (or no longer) this process's child: no subreaper here, so init reaps it.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return LOST_EXIT
        except PermissionError:
            return LOST_EXIT  # the pid went to another user's process: ours is gone
        return None
    return os.waitstatus_to_exitcode(status) if reaped else None


@dataclass(eq=False)
class Template:
    """One generation's template, as the supervisor sees it."""

    generation: int
    process: subprocess.Popen[bytes]
    sock: socket.socket
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    buffer: bytes = b""
    #: The request in flight: (slot, read end of the child's report pipe, monotonic time,
    #: write end of its gate).
    asked: tuple[int, int, float, int] | None = None
    #: The worker processes it forked that have not exited yet, by pid.
    children: dict[int, ForkedProcess] = field(default_factory=dict)
    closing: bool = False  # the supervisor shut its side: it exits after its children
    refused: str = ""  # why it will not fork (``N``)
    exit_code: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def gone(self) -> bool:
        return self.exit_code is not None

    @classmethod
    def start(cls, argv: list[str], generation: int) -> Template:
        """Start the template of ``generation``: ``argv`` (a worker process's command) with its
        end of a socket pair. Raises OSError when it cannot be started."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ours.setblocking(False)
            fd = theirs.fileno()
            # With the start signals held, as a worker process is started: they wait for its
            # own dispositions (``template.serve``) instead of ending it while it imports.
            with signals_held():
                process = subprocess.Popen([*argv, "--child-template-fd", str(fd)], pass_fds=(fd,))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(generation, process, ours)

    def ask(self, slot: int, scheduler: bool) -> bool:
        """Ask for the worker process of ``slot``; False when it cannot be asked now."""
        if not self.ready or self.closing or self.asked is not None or self.refused:
            return False
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        gate_read, gate_write = os.pipe()
        try:
            socket.send_fds(
                self.sock, [f"F {slot} {int(scheduler)}\n".encode()], [write_end, gate_read]
            )
        except OSError as exc:
            os.close(read_end)
            os.close(gate_write)
            logger.error("Could not ask the template (pid %s) for a process: %s", self.pid, exc)
            return False
        finally:
            os.close(write_end)
            os.close(gate_read)
        self.asked = (slot, read_end, time.monotonic(), gate_write)
        return True

    def read(self) -> list[list[str]]:
        """Its lines since the last read, each split into words."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.buffer += chunk
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pass  # closed: the process's exit says the rest
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode(errors="replace").split() for line in lines if line.strip()]

    def close(self) -> None:
        """No more requests: it exits once its children have."""
        if self.closing:
            return
        self.closing = True
        if self.asked is not None:
            os.close(self.asked[1])
            os.close(self.asked[3])
            self.asked = None
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def forget(self) -> None:
        """It exited: its socket goes; its children's exits are read by pid from now on."""
        self.close()
        self.sock.close()

    def signal(self, signum: int) -> None:
        try:
            self.process.send_signal(signum)
        except ProcessLookupError:
            pass
