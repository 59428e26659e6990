"""A worker process as the supervisor sees it (``Child``), and what it hears on its pipe.

The child writes one short line per message (``engine.child``: ``READY``, ``S``, ``U``, ``R``,
``B``, ``Q``, ``D``); ``Child.read`` takes the lines written since the last turn and
``Child.hear`` keeps what each tells: its worker id, the jobs it started and recorded, its jobs
with a hard limit and their deadlines, its counts, that it is about to finish and that it claims
no more. The parent holds the write end of its gate (``Child.open_gate``). The supervisor acts on
that (``engine.worker.slots``, ``engine.worker.lost_attempts``); a child here only knows itself.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ... import clock
from ..rows.fleet import process_entry
from .forking import ForkedProcess

logger = logging.getLogger("django_jobs.worker")

#: Seconds a child has to say it is ready before it is killed and started again.
STARTUP_TIMEOUT = 60.0
#: The longest wait before restarting a child that keeps dying at start.
MAX_BACKOFF = 30.0


@dataclass(eq=False)
class Child:
    """One worker process, as the parent sees it."""

    index: int
    generation: int
    #: A process forked by its generation's template, or started as a new interpreter.
    process: subprocess.Popen[bytes] | ForkedProcess
    pipe: int  # the read end of its pipe
    started: float = field(default_factory=time.monotonic)
    worker_id: str | None = None  # from its READY line
    buffer: bytes = b""
    #: Jobs with a hard time limit it is running: id -> (monotonic deadline, limit in seconds).
    limited: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: Jobs it was ended for: id -> their time limit in seconds.
    overdue: dict[int, float] = field(default_factory=dict)
    kill_at: float | None = None
    #: Jobs it started whose outcome it has not recorded yet: id -> ``S`` lines heard less
    #: ``R`` (a job retried by the same child may start again before its ``R`` is heard).
    begun: dict[int, int] = field(default_factory=dict)
    recorded: int = 0  # outcomes it recorded (``R``), the count of a child killed between beats
    retiring: bool = False  # of an old generation, or stopping: not replaced when it exits
    #: The write end of its gate (``engine.child``): it claims nothing until this is closed.
    gate: int | None = None
    claiming: bool = True  # until its ``D``: it may still claim
    jobs_running: int = 0
    jobs_done: int = 0
    #: Its resident memory in bytes, as its last heartbeat (``B``) said; 0 before the first.
    rss_bytes: int = 0
    started_at: datetime = field(default_factory=clock.now)

    @property
    def pid(self) -> int:
        return self.process.pid

    def detail(self, restarts: int) -> dict[str, Any]:
        """This process as its worker's row lists it (``processes_detail``); ``restarts``: of
        its slot so far."""
        return process_entry(
            slot=self.index,
            pid=self.pid,
            generation=self.generation,
            started_at=self.started_at,
            rss_bytes=self.rss_bytes,
            jobs_done=max(self.jobs_done, self.recorded),
            restarts=restarts,
            jobs=self.begun,
        )

    def signal(self, signum: int) -> None:
        try:
            self.process.send_signal(signum)
        except ProcessLookupError:
            pass

    def open_gate(self) -> None:
        """Let it claim (``engine.child``): its gate's end of file."""
        if self.gate is not None:
            os.close(self.gate)
            self.gate = None

    def read(self) -> list[list[str]]:
        """Its lines since the last read, each split into words."""
        try:
            while True:
                chunk = os.read(self.pipe, 65536)
                if not chunk:
                    break
                self.buffer += chunk
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode(errors="replace").split() for line in lines]

    def hear(self, words: list[str]) -> bool:
        """Keep what one line of its pipe tells. True for its ``READY``: the older children of
        its slot may stop now."""
        if not words:
            return False
        verb, args = words[0], words[1:]
        if verb == "S" and args:
            job_id = int(args[0])
            self.begun[job_id] = self.begun.get(job_id, 0) + 1
            if len(args) == 2:
                limit = float(args[1])
                self.limited[job_id] = (time.monotonic() + limit, limit)
        elif verb == "U" and args:
            self.limited.pop(int(args[0]), None)
        elif verb == "R":
            self.recorded += len(args)
            for job_id in map(int, args):
                if self.begun.get(job_id, 0) > 1:
                    self.begun[job_id] -= 1
                else:
                    self.begun.pop(job_id, None)
        elif verb == "B" and len(args) in (2, 3):
            self.jobs_running, self.jobs_done = int(args[0]), int(args[1])
            if len(args) == 3:
                self.rss_bytes = int(args[2])
        elif verb == "Q" and not self.retiring:
            # It claims no more and exits after its jobs: its replacement starts now
            # (``manage_children``), and its exit is no failure.
            self.retiring = True
        elif verb == "D":
            self.claiming = False
        elif verb == "READY" and args:
            self.worker_id = args[0]
            logger.info(
                "Worker process %s ready (pid %s), %s in %.0f ms.",
                self.index,
                self.process.pid,
                "forked" if isinstance(self.process, ForkedProcess) else "started",
                (time.monotonic() - self.started) * 1000,
            )
            return True
        return False
