"""The supervisor: ``runjobs --processes N`` runs no job itself; it keeps N worker processes.

::

    runjobs (parent: signals, the worker's row, hard limits, lost children; no job, no thread)
      ├── child 1: runjobs --processes 0 (a ``Worker``: claim loop, keeper, listener,
      │            --concurrency executor threads, its own database connections)
      ├── child 2: the same, without the scheduler (one child fires the schedules)
      └── ...      each child writes its pipe to the parent (``engine.child``)

The loop, after gunicorn's arbiter: signals set flags and wake it (``signal.set_wakeup_fd``, a
self-pipe); each turn it reads the children's pipes, ``reap_children`` (an exit is seen at
once: SIGCHLD wakes the loop), ``murder_overdue`` (a job past its hard time limit: SIGTERM to
its child, SIGKILL 5 s later), ``manage_children`` (keep N of the current generation, with
backoff for a child that dies as it starts), and beats the worker's row.

Children are started as new interpreters (``subprocess``), not forked: a child imports the
project afresh, so SIGHUP (and ``--reload``) brings new code in a new generation, and no
database connection or socket of the parent is ever shared with a child.

Only the parent knows that a child died and how: it ends the child's running attempts at once
(``WORKER_LOST``, or ``JOB_TIMEOUT`` for the job it ended for its time limit) through the
executor's crash path, so the retry policy applies and the events go out, instead of leaving
the jobs to the lease. The lease still recovers the jobs of a machine that died whole.

The parent knows pids, generations and limits, and nothing about steps or events.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import select
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.db import DatabaseError, close_old_connections, connections

from ..conf import jobs_settings
from ..durations import format_duration
from ..exceptions import JobTimeout, WorkerLost
from ..models import Job
from ..states import JobState, WorkerState
from ..store import get_store
from . import fleet
from .child import RECYCLE_EXIT
from .context import LiveState
from .executor import Executor
from .hooks import call_hooks
from .interrupts import print_stacks
from .loops import bound_silent_network
from .runner import publish_recorded

logger = logging.getLogger("django_jobs.worker")

#: Seconds between SIGTERM and SIGKILL for a child whose job ran past its hard time limit.
KILL_AFTER = 5.0
#: Seconds a child has to say it is ready before it is killed and started again.
STARTUP_TIMEOUT = 60.0
#: A child that dies within this many seconds of its start is restarted with backoff.
STARTUP_WINDOW = 10.0
#: The longest wait before restarting a child that keeps dying at start.
MAX_BACKOFF = 30.0
#: Seconds between two looks at the project's Python files (``--reload``).
RELOAD_EVERY = 1.0


@dataclass(eq=False)
class Child:
    """One worker process, as the parent sees it."""

    index: int
    generation: int
    process: subprocess.Popen[bytes]
    pipe: int  # the read end of its pipe
    started: float = field(default_factory=time.monotonic)
    worker_id: str | None = None  # from its READY line
    buffer: bytes = b""
    #: Jobs with a hard time limit it is running: id -> (monotonic deadline, limit in seconds).
    limited: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: Jobs it was ended for: id -> their time limit in seconds.
    overdue: dict[int, float] = field(default_factory=dict)
    kill_at: float | None = None
    retiring: bool = False  # of an old generation, or stopping: not replaced when it exits
    jobs_running: int = 0
    jobs_done: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid


class Supervisor:
    """Keeps ``processes`` worker processes running the command ``child_argv``."""

    def __init__(
        self,
        *,
        child_argv: list[str],
        processes: int,
        name: str,
        engine: str = "default",
        queues: list[str] | None = None,
        concurrency: int = 1,
        burst: bool = False,
        scheduler: bool = True,
        reload: bool = False,
        alias: str | None = None,
    ) -> None:
        self.child_argv = child_argv
        self.processes = processes
        self.name = name
        self.engine = engine
        self.queues = queues
        self.concurrency = concurrency
        self.burst = burst
        self.scheduler = scheduler
        self.reload = reload
        self.alias = alias or jobs_settings.DATABASE
        self.children: list[Child] = []
        self.generation = 0
        self.done = [False] * processes  # burst: the slots whose child found nothing more
        self.failures = [0] * processes  # deaths at start in a row, per slot
        self.start_after = [0.0] * processes  # monotonic time a slot may start a child again
        self.jobs_done_before = 0  # jobs done by children that exited
        self.signals: deque[int] = deque()
        self.stopping = False
        self.exit_code = 0

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        for fd in (wake_r, wake_w):
            os.set_blocking(fd, False)
            fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in handled}
        try:
            # The parent's own connection, as long-lived as a worker's: the same options.
            connections[self.alias].close()
            bound_silent_network(get_store(self.alias))
            self._register_row()
            logger.info(
                "Supervisor %s (pid %s): %s process(es) x %s thread(s), engine=%s queues=%s",
                self.name,
                os.getpid(),
                self.processes,
                self.concurrency,
                self.engine,
                ",".join(self.queues or []) or "*",
            )
            beat_every = max(jobs_settings.lease.total_seconds() / 3, 0.2)
            next_beat = time.monotonic() + beat_every
            watched = self._python_files() if self.reload else {}
            next_look = time.monotonic() + RELOAD_EVERY
            while True:
                self._handle_signals()
                self.manage_children()
                if not self.children and (self.stopping or all(self.done)):
                    break
                self._wait(wake_r)
                self._read_pipes()
                self.reap_children()
                self.murder_overdue()
                now = time.monotonic()
                if now >= next_beat:
                    self._beat_row()
                    next_beat = now + beat_every
                if self.reload and now >= next_look:
                    next_look = now + RELOAD_EVERY
                    files = self._python_files()
                    if files != watched:
                        watched = files
                        logger.warning("Python files changed: starting new worker processes.")
                        self.new_generation()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(old_wakeup)
            os.close(wake_r)
            os.close(wake_w)
            self._mark(WorkerState.STOPPED)
            connections.close_all()
        logger.info("Supervisor %s stopped after %s jobs.", self.name, self.jobs_done_before)
        return self.exit_code

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)  # the loop acts on it; the wakeup fd woke it

    def _wait(self, wake_r: int) -> None:
        fds = [wake_r, *(child.pipe for child in self.children)]
        try:
            ready, _, _ = select.select(fds, [], [], 0.2)
        except InterruptedError:
            return
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass

    def _handle_signals(self) -> None:
        while self.signals:
            signum = self.signals.popleft()
            if signum == signal.SIGCHLD:
                continue  # reap_children looks at every child each turn
            if signum == signal.SIGUSR1:
                # This process's stacks, then the signal passed on to each worker process,
                # which prints its own.
                print_stacks()
                for child in self.children:
                    self._signal(child, signal.SIGUSR1)  # each prints its threads' stacks
                continue
            if signum == signal.SIGHUP:
                if not self.stopping:
                    logger.warning("SIGHUP: starting new worker processes; the old ones finish.")
                    self.new_generation()
                continue
            if self.stopping:
                logger.warning("Second signal: killing the worker processes now.")
                self.kill_all()
                continue
            logger.info("Signal %s: the worker processes finish in-flight jobs and stop.", signum)
            self.stopping = True
            self._mark(WorkerState.STOPPING)
            for child in self.children:
                child.retiring = True
                self._signal(child, signal.SIGTERM)

    # -- children -----------------------------------------------------------------------------

    def manage_children(self) -> None:
        """Start a child in each slot of the current generation that has none."""
        if self.stopping:
            return
        taken = {c.index for c in self.children if c.generation == self.generation}
        now = time.monotonic()
        for index in range(self.processes):
            if index in taken or self.done[index] or now < self.start_after[index]:
                continue
            self.spawn_child(index)

    def spawn_child(self, index: int) -> None:
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        fcntl.fcntl(read_end, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        argv = [*self.child_argv, "--child-report-fd", str(write_end)]
        if index > 0 or not self.scheduler:
            argv.append("--no-scheduler")  # one child fires the schedules
        try:
            # In the parent's process group: a Ctrl-C reaches the children too, which leave
            # it to the parent (``Worker.install_signal_handlers``).
            process = subprocess.Popen(argv, pass_fds=(write_end,))
        except OSError as exc:
            os.close(read_end)
            logger.error("Could not start a worker process (%s); trying again in 5s.", exc)
            self.start_after[index] = time.monotonic() + 5.0
            return
        finally:
            os.close(write_end)
        self.children.append(Child(index, self.generation, process, read_end))

    def new_generation(self) -> None:
        """SIGHUP or ``--reload``: start new children. Each old one goes on until the new one
        of its slot is ready, then finishes its in-flight work and exits (``_retire_old``):
        no gap while the new code imports, and a new generation that cannot start leaves the
        old one running."""
        self.generation += 1
        self.done = [False] * self.processes
        self.failures = [0] * self.processes
        self.start_after = [0.0] * self.processes
        self.manage_children()

    def _retire_old(self, ready: Child) -> None:
        """The new child of a slot is ready: the older ones of that slot stop."""
        for child in self.children:
            if (
                child.index == ready.index
                and child.generation < ready.generation
                and not child.retiring
            ):
                child.retiring = True
                self._signal(child, signal.SIGTERM)

    def kill_all(self) -> None:
        for child in self.children:
            child.retiring = True
            self._signal(child, signal.SIGKILL)
        self.exit_code = 1

    def _signal(self, child: Child, signum: int) -> None:
        try:
            child.process.send_signal(signum)
        except ProcessLookupError:
            pass

    def _read_pipes(self) -> None:
        for child in self.children:
            try:
                while True:
                    chunk = os.read(child.pipe, 65536)
                    if not chunk:
                        break
                    child.buffer += chunk
            except BlockingIOError:
                pass
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
            *lines, child.buffer = child.buffer.split(b"\n")
            for line in lines:
                self._heard(child, line.decode(errors="replace").split())

    def _heard(self, child: Child, words: list[str]) -> None:
        if not words:
            return
        verb, args = words[0], words[1:]
        if verb == "S" and len(args) == 2:
            limit = float(args[1])
            child.limited[int(args[0])] = (time.monotonic() + limit, limit)
        elif verb == "E" and args:
            child.limited.pop(int(args[0]), None)
        elif verb == "B" and len(args) == 2:
            child.jobs_running, child.jobs_done = int(args[0]), int(args[1])
        elif verb == "READY" and args:
            child.worker_id = args[0]
            logger.info("Worker process %s ready (pid %s).", child.index, child.process.pid)
            self._retire_old(child)

    def reap_children(self) -> None:
        """Handle each child that exited: end its running attempts, and say why it ended."""
        for child in list(self.children):
            code = child.process.poll()
            if code is None:
                self._check_startup(child)
                continue
            self._read_pipes()  # its last lines
            self.children.remove(child)
            os.close(child.pipe)
            self.jobs_done_before += child.jobs_done
            self._exited(child, code)

    def _check_startup(self, child: Child) -> None:
        if child.worker_id is None and time.monotonic() - child.started > STARTUP_TIMEOUT:
            logger.error(
                "Worker process %s did not say it was ready within %ss; killing it.",
                child.pid,
                int(STARTUP_TIMEOUT),
            )
            self._signal(child, signal.SIGKILL)

    def _exited(self, child: Child, code: int) -> None:
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        clean = code in (0, RECYCLE_EXIT) and not child.overdue
        if not clean and child.worker_id is not None:
            self.end_lost_attempts(child, how)
        if child.retiring or self.stopping or child.generation != self.generation:
            return
        index = child.index
        if code == RECYCLE_EXIT or child.overdue:
            self.failures[index] = 0
            return  # replaced at once by manage_children
        if code == 0 and self.burst:
            self.done[index] = True  # it found nothing more to do
            return
        if child.worker_id is None or time.monotonic() - child.started < STARTUP_WINDOW:
            self.failures[index] += 1
            delay = min(2.0 ** (self.failures[index] - 1), MAX_BACKOFF)
            self.start_after[index] = time.monotonic() + delay
            logger.error(
                "Worker process %s exited (%s) %s; starting another in %ss. Its own error is "
                "above (a failing import, a setting, the database?).",
                child.pid,
                how,
                "before it was ready" if child.worker_id is None else "just after it started",
                f"{delay:g}",
            )
            return
        self.failures[index] = 0
        logger.error("Worker process %s ended (%s); starting another.", child.pid, how)

    def murder_overdue(self) -> None:
        """End the children running a job past its hard time limit: SIGTERM (the other jobs
        of the child finish), then SIGKILL ``KILL_AFTER`` seconds later."""
        now = time.monotonic()
        for child in self.children:
            if child.kill_at is not None:
                if now >= child.kill_at:
                    child.kill_at = float("inf")
                    self._signal(child, signal.SIGKILL)
                continue
            late = {job_id: limit for job_id, (at, limit) in child.limited.items() if now >= at}
            if not late:
                continue
            child.overdue.update(late)
            child.kill_at = now + KILL_AFTER
            for job_id, limit in late.items():
                logger.error(
                    "Job %s ran past its time limit of %s: ending worker process %s (SIGTERM, "
                    "then SIGKILL in %ss).",
                    job_id,
                    format_duration(timedelta(seconds=limit)),
                    child.pid,
                    int(KILL_AFTER),
                )
            self._signal(child, signal.SIGTERM)

    # -- the database -------------------------------------------------------------------------

    def end_lost_attempts(self, child: Child, how: str) -> None:
        """End the running attempts of a child that died: ``JOB_TIMEOUT`` for a job it was
        ended for, ``WORKER_LOST`` for the others; the retry policy applies to each."""
        worker_id = child.worker_id
        assert worker_id is not None
        for attempt in range(5):
            try:
                close_old_connections()
                ended = self._end_attempts(worker_id, child, how)
            except DatabaseError as exc:
                logger.error(
                    "Could not end the jobs of worker process %s (%s); trying again.",
                    child.pid,
                    exc,
                )
                connections[self.alias].close()
                time.sleep(min(0.2 * 2**attempt, 2.0))
                continue
            if ended:
                logger.error(
                    "Worker process %s died (%s) while running job(s) %s: their attempts ended.",
                    child.pid,
                    how,
                    ", ".join(str(job_id) for job_id in ended),
                )
            return
        logger.error(
            "Gave up ending the jobs of worker process %s: their lease returns them.", child.pid
        )

    def _end_attempts(self, worker_id: str, child: Child, how: str) -> list[int]:
        jobs = list(
            Job.objects.using(self.alias).filter(worker_id=worker_id, state=JobState.RUNNING)
        )
        if not jobs:
            return []
        executor = Executor(worker_id)
        ended = []
        for job in jobs:
            limit = child.overdue.get(job.pk)
            exc: Exception
            if limit is not None:
                exc = JobTimeout(
                    "killed after running past its time limit of "
                    f"{format_duration(timedelta(seconds=limit))}"
                )
            else:
                exc = WorkerLost(f"worker process {child.pid} died ({how}) while running this job")
            live = LiveState(job)
            ended.append((job, executor.crashed(job, exc, live), live, exc))
        written = set(get_store(self.alias).record([outcome for _, outcome, _, _ in ended]))
        for job, outcome, live, exc in ended:
            if job.pk in written:
                publish_recorded(job, outcome, live)
                if live.hooks is not None:
                    call_hooks(live.hooks, job, outcome, exc)
        return [job.pk for job, *_ in ended if job.pk in written]

    def _register_row(self) -> None:
        try:
            fleet.register(
                self.name,
                engine=self.engine,
                queues=self.queues,
                processes=self.processes,
                concurrency=self.concurrency,
                using=self.alias,
            )
        except DatabaseError:
            logger.exception("Could not write worker %s's row; trying at the next beat.", self.name)

    def _counts(self) -> tuple[int, int]:
        running = sum(child.jobs_running for child in self.children)
        return running, self.jobs_done_before + sum(child.jobs_done for child in self.children)

    def _beat_row(self) -> None:
        running, done = self._counts()
        try:
            close_old_connections()
            written = fleet.beat(self.name, jobs_running=running, jobs_done=done, using=self.alias)
        except DatabaseError as exc:
            logger.error("Could not beat worker %s's row (%s).", self.name, exc)
            connections[self.alias].close()
            return
        if written == 0 and not self.stopping:
            self._register_row()

    def _mark(self, state: str) -> None:
        running, done = self._counts()
        try:
            fleet.mark(self.name, state, jobs_running=running, jobs_done=done, using=self.alias)
        except Exception:  # the row is for the operators: it must never stop a shutdown
            logger.exception("Could not mark worker %s %s.", self.name, state)

    # -- --reload -----------------------------------------------------------------------------

    def _python_files(self) -> dict[Path, float]:
        """The modification times of the project's imported Python files."""
        from django.utils.autoreload import iter_all_python_module_files

        times = {}
        for path in _project_files(iter_all_python_module_files()):
            try:
                times[path] = path.stat().st_mtime
            except OSError:
                continue
        return times


def _project_files(paths: Iterable[Path]) -> Iterator[Path]:
    """The files under the current directory: the project's, not the installed packages'."""
    here = Path.cwd().resolve()
    for path in paths:
        if path.is_relative_to(here) and "site-packages" not in path.parts:
            yield path
