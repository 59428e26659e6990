"""The supervisor: ``runjobs --processes N`` runs no job itself; it keeps N worker processes.

::

    runjobs (parent: signals, the worker's row, hard limits, lost children; no job, no thread)
      └── template of the generation (``engine.template``: imported once, forks on request)
            ├── child 1: a ``Worker`` (claim loop, keeper, listener, --concurrency executor
            │            threads, its own database connections)
            ├── child 2: the same, without the scheduler (one child fires the schedules)
            └── ...      each child writes its pipe to the parent (``engine.child``)

The loop, after gunicorn's arbiter: signals set flags and wake it (``signal.set_wakeup_fd``, a
self-pipe); each turn it reads the children's pipes and the templates' sockets,
``reap_children`` (an exit is seen at once: SIGCHLD, or the template's report, wakes the loop),
``murder_overdue`` (a job whose thread did not unwind 1 s after its hard time limit: its child
stops claiming, its other jobs get ``KILL_GRACE``, then SIGKILL), ``manage_children`` (keep N
of the current generation, with backoff for a child that exits by itself as it starts), and
beats the worker's row.

Children are forked from a template (``engine.template``, ``engine.forking``): one process per
generation, started as a new interpreter that imports the project and opens nothing, which
forks a child on request in milliseconds. SIGHUP (and ``--reload``) starts a new generation and
so a new template: new code, freshly imported. No database connection or socket of the parent
or the template is ever shared with a child. A template that dies is started again; one that
will not fork, or keeps dying, leaves its generation to children started as new interpreters
(``subprocess``), as before templates, and the parent says so.

Signals at start: every process is started with SIGTERM, SIGHUP and SIGUSR1 blocked
(``interrupts.signals_held``) until its handlers are installed, so a stack dump asked while
children start never kills one. A child killed by a signal as it starts is started again at
once (a signal is not a failing import); one that exits by itself before it is ready is
started again with backoff.

Only the parent knows that a child died and how: it ends the child's running attempts at once
(``WORKER_LOST``, or ``JOB_TIMEOUT`` for the job it ended for its time limit) through the
executor's crash path, so the retry policy applies and the events go out, instead of leaving
the jobs to the lease; a job the child claimed but never started (the pipe's ``S`` tells), and
a job of a child ended for another job's time limit, go back to the queue at their place, their
attempt not used. The lease still recovers the jobs of a machine that died whole.

The parent knows pids, generations and limits, and nothing about steps or events.

supervisor.py       ``Supervisor``: the loop and its verbs (start, stop, new generation, signals)
slots.py            a child in each slot: forked or spawned, heard, reaped, started again
template_keeper.py  the templates of the generations: started, heard, reaped, ended
children.py         ``Child``: one worker process as the parent sees it, and its pipe's lines
attempts.py         the children's jobs: overdue ones' children ended, lost ones settled
fleet_row.py        the supervisor's worker row: registered, beaten, marked
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.db import connections

from ...conf import jobs_settings
from ...states import WorkerState
from ...store import get_store
from ..run.loops import bound_silent_network
from .fleet_row import FleetRow
from .forking import become_subreaper, can_fork
from .interrupts import print_stacks
from .lost_attempts import LostAttempts
from .slots import Slots

logger = logging.getLogger("django_jobs.worker")

#: Seconds the loop lets the children's lines gather when only they woke it: a child writes
#: one per job started, and a turn per line would cost the parent more than the job.
LINES_EVERY = 0.02
#: Seconds between two looks at the project's Python files (``--reload``).
RELOAD_EVERY = 1.0
#: The signals the loop acts on: each appended to ``Supervisor.signals``, and the loop woken.
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1)


class Supervisor(Slots):
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
        self.children = []
        self.generation = 0
        # The slots (``Slots``):
        self.done = [False] * processes
        self.failures = [0] * processes
        self.start_after = [0.0] * processes
        self.signal_deaths = [0] * processes
        self.restarts = [0] * processes
        self.processes_changed = False
        self.jobs_done_before = 0
        # The templates (``TemplateKeeper``):
        self.templates = []
        self.interpreters = not can_fork()
        self.template_failures = 0
        self.template_deaths = 0
        self.template_after = 0.0
        self.subreaper = False
        self.signals: deque[int] = deque()
        self.lost = LostAttempts(self.alias)
        self.row = FleetRow(
            name,
            engine=engine,
            queues=queues,
            processes=processes,
            concurrency=concurrency,
            alias=self.alias,
        )
        self.stopping = False
        self.exit_code = 0

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        for fd in (wake_r, wake_w):
            os.set_blocking(fd, False)
            fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in HANDLED}
        try:
            self.start()
            self._loop(wake_r)
        finally:
            self.end_templates()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(old_wakeup)
            os.close(wake_r)
            os.close(wake_w)
            self._mark(WorkerState.STOPPED)
            connections.close_all()
        logger.info("Supervisor %s stopped after %s jobs.", self.name, self.jobs_done_before)
        return self.exit_code

    def start(self) -> None:
        """Before the first turn: the subreaper, the parent's connection, its row."""
        self.subreaper = become_subreaper()
        # The parent's own connection, as long-lived as a worker's: the same options.
        connections[self.alias].close()
        bound_silent_network(get_store(self.alias))
        self.row.register()
        logger.info(
            "Supervisor %s (pid %s): %s process(es) x %s thread(s), engine=%s queues=%s",
            self.name,
            os.getpid(),
            self.processes,
            self.concurrency,
            self.engine,
            ",".join(self.queues or []) or "*",
        )

    def _loop(self, wake_r: int) -> None:
        """Turns until no child is left and none is to start (stopping, or ``--burst`` done)."""
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
            self.read_pipes()
            self.read_templates()
            self.reap_children()
            self.murder_overdue()
            now = time.monotonic()
            if now >= next_beat or self.processes_changed:
                self.processes_changed = False
                self._beat_row()
                next_beat = now + beat_every
            if self.reload and now >= next_look:
                next_look = now + RELOAD_EVERY
                files = self._python_files()
                if files != watched:
                    watched = files
                    logger.warning("Python files changed: starting new worker processes.")
                    self.new_generation()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)  # the loop acts on it; the wakeup fd woke it

    def _wait(self, wake_r: int) -> None:
        fds = [
            wake_r,
            *(child.pipe for child in self.children),
            *(template.sock.fileno() for template in self.templates),
        ]
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
        elif ready:
            # Only the children's lines (a start per job): read them in batches, not one
            # wake-up per job. A signal still wakes the next turn; this one waits a little.
            time.sleep(LINES_EVERY)

    def murder_overdue(self) -> None:
        """The children whose job overran its hard time limit, ended; the jobs of those that
        died ``LATE_CLAIMS`` ago, looked at again (``engine.worker.lost_attempts``)."""
        self.lost.murder_overdue(self.children)

    # -- the signals and their verbs ----------------------------------------------------------

    def _handle_signals(self) -> None:
        while self.signals:
            signum = self.signals.popleft()
            if signum == signal.SIGCHLD:
                continue  # reap_children looks at every child each turn
            if signum == signal.SIGUSR1:
                self.dump_stacks()
            elif signum == signal.SIGHUP:
                if not self.stopping:
                    logger.warning("SIGHUP: starting new worker processes; the old ones finish.")
                    self.new_generation()
            elif self.stopping:
                logger.warning("Second signal: killing the worker processes now.")
                self.kill_all()
            else:
                logger.info(
                    "Signal %s: the worker processes finish in-flight jobs and stop.", signum
                )
                self.stop()

    def dump_stacks(self) -> None:
        """SIGUSR1: this process's stacks, then the signal passed on to each worker process,
        which prints its own."""
        print_stacks(f"supervisor of worker {self.name}")
        for child in self.children:
            child.signal(signal.SIGUSR1)  # each prints its threads' stacks

    def new_generation(self) -> None:
        """SIGHUP or ``--reload``: start new children. Each old one goes on until the new one
        of its slot is ready, then finishes its in-flight work and exits (``_retire_old``):
        no gap while the new code imports, and a new generation that cannot start leaves the
        old one running."""
        self.generation += 1
        self.done = [False] * self.processes
        self.failures = [0] * self.processes
        self.signal_deaths = [0] * self.processes
        self.start_after = [0.0] * self.processes
        for template in self.templates:
            template.close()  # the old code forks no more; it exits after its children
        self.interpreters = not can_fork()
        self.template_failures = self.template_deaths = 0
        self.template_after = 0.0
        self.manage_children()

    def stop(self) -> None:
        """SIGTERM or SIGINT: the children finish their in-flight jobs and exit, and none is
        started again."""
        self.stopping = True
        self._mark(WorkerState.STOPPING)
        for template in self.templates:
            template.close()  # no more children; each exits after its own
        for child in self.children:
            child.retiring = True
            child.signal(signal.SIGTERM)

    def kill_all(self) -> None:
        """A second SIGTERM or SIGINT: the children and the templates killed now."""
        for child in self.children:
            child.retiring = True
            child.signal(signal.SIGKILL)
        for template in self.templates:
            template.close()
            template.signal(signal.SIGKILL)
        self.exit_code = 1

    # -- the worker's row ---------------------------------------------------------------------

    def _counts(self) -> tuple[int, int]:
        running = sum(child.jobs_running for child in self.children)
        done = sum(max(child.jobs_done, child.recorded) for child in self.children)
        return running, self.jobs_done_before + done

    def _beat_row(self) -> None:
        running, done = self._counts()
        self.row.beat(running, done, stopping=self.stopping, processes=self.processes_detail())

    def _mark(self, state: str) -> None:
        running, done = self._counts()
        self.row.mark(state, running, done)

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
