"""The supervisor's slots: a child in each of the current generation's, started, heard, reaped
and started again.

A child is forked by its generation's template (``engine.worker.template_keeper``), or started
as a new interpreter where there is none (``spawn_child``). Its pipe's lines are read each turn
(``engine.worker.children``); a new child that is ready retires the older ones of its slot. An
exit is seen at once (SIGCHLD, or the template's report, wakes the loop): the child's running
attempts are ended (``engine.worker.lost_attempts``), and its slot started again, at once for a
child that finished to be replaced, was killed by a signal as it started (up to
``SIGNAL_DEATHS_AT_ONCE`` in a row) or ran for a while, with backoff for one that exits by
itself as it starts.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import time
from typing import Any

from .child import RECYCLE_EXIT
from .children import MAX_BACKOFF, STARTUP_TIMEOUT, Child
from .interrupts import signals_held
from .lost_attempts import LostAttempts
from .template_keeper import TemplateKeeper

logger = logging.getLogger("django_jobs.worker")

#: A child that dies within this many seconds of its start is restarted with backoff.
STARTUP_WINDOW = 10.0
#: Deaths at start by a signal in a row, per slot, restarted at once; from the next one on, with
#: backoff (a signal every time, a C extension crashing as it loads, is a fault too).
SIGNAL_DEATHS_AT_ONCE = 3


class Slots(TemplateKeeper):
    """The slots of a supervisor (``Supervisor`` sets every attribute in ``__init__``)."""

    processes: int
    burst: bool
    scheduler: bool
    lost: LostAttempts
    done: list[bool]  # burst: the slots whose child found nothing more
    failures: list[int]  # deaths at start in a row, per slot
    start_after: list[float]  # monotonic time a slot may start a child again
    signal_deaths: list[int]  # deaths at start by a signal in a row, per slot
    restarts: list[int]  # children that died and were started again, per slot, ever
    jobs_done_before: int  # jobs done by children that exited
    #: A child became ready or exited since the row's last beat: the row is written again
    #: at the next turn, not a third of the lease later.
    processes_changed: bool

    def manage_children(self) -> None:
        """Start a child in each slot of the current generation that has none."""
        if self.stopping:
            return
        # A retiring child of this generation (its template died) is replaced at once.
        taken = {
            c.index for c in self.children if c.generation == self.generation and not c.retiring
        }
        taken |= {t.asked[0] for t in self.templates if t.asked and t.generation == self.generation}
        now = time.monotonic()
        for index in range(self.processes):
            if index in taken or self.done[index] or now < self.start_after[index]:
                continue
            if self.interpreters:
                self.spawn_child(index)
            elif not self.fork_child(index):
                return  # the template is not ready, or busy with a request: the next turn

    def fork_child(self, index: int) -> bool:
        """Ask this generation's template for the child of ``index`` (starting the template
        first if there is none). False when it cannot be asked now."""
        template = self.current_template()
        if template is None:
            return False
        return template.ask(index, scheduler=index == 0 and self.scheduler)

    def spawn_child(self, index: int) -> None:
        """Start the child of ``index`` as a new interpreter (no template)."""
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        fcntl.fcntl(read_end, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        gate_read, gate_write = os.pipe()  # not inherited by the children started later
        argv = [
            *self.child_argv,
            *("--child-report-fd", str(write_end), "--child-gate-fd", str(gate_read)),
        ]
        if index > 0 or not self.scheduler:
            argv.append("--no-scheduler")  # one child fires the schedules
        try:
            # In the parent's process group: a Ctrl-C reaches the children too, which leave
            # it to the parent (``Worker.install_signal_handlers``). With the start signals
            # held: they wait for the child's handlers instead of ending it as it imports.
            with signals_held():
                process = subprocess.Popen(argv, pass_fds=(write_end, gate_read))
        except OSError as exc:
            os.close(read_end)
            os.close(gate_write)
            logger.error("Could not start a worker process (%s); trying again in 5s.", exc)
            self.start_after[index] = time.monotonic() + 5.0
            return
        finally:
            os.close(write_end)
            os.close(gate_read)
        self.children.append(Child(index, self.generation, process, read_end, gate=gate_write))

    def open_gates(self) -> None:
        """Let each child claim whose slot has no older child of its generation still
        claiming (``engine.child``): a replacement's first claim waits for the last claim of
        the child it replaces, or for its exit."""
        for child in self.children:
            if child.gate is None:
                continue
            if not any(
                other.index == child.index
                and other.generation == child.generation
                and other.started < child.started
                and other.claiming
                for other in self.children
            ):
                child.open_gate()

    def processes_detail(self) -> list[dict[str, Any]]:
        """The worker's processes for its row (``processes_detail``), by slot, the older
        generation first."""
        return [
            child.detail(self.restarts[child.index])
            for child in sorted(self.children, key=lambda c: (c.index, c.generation))
        ]

    def read_pipes(self) -> None:
        for child in self.children:
            for words in child.read():
                if child.hear(words):
                    self._retire_old(child)
                    self.processes_changed = True

    def _retire_old(self, ready: Child) -> None:
        """The new child of a slot is ready: the older ones of that slot stop."""
        for child in self.children:
            if (
                child.index == ready.index
                and child.generation < ready.generation
                and not child.retiring
            ):
                child.retiring = True
                child.signal(signal.SIGTERM)

    def reap_children(self) -> None:
        """Handle each child that exited: end its running attempts, and say why it ended."""
        self.reap_templates()
        for child in list(self.children):
            code = child.process.poll()
            if code is None:
                self._check_startup(child)
                continue
            self.read_pipes()  # its last lines
            self.children.remove(child)
            os.close(child.pipe)
            child.open_gate()
            self.jobs_done_before += max(child.jobs_done, child.recorded)
            self.processes_changed = True
            self._exited(child, code)
        if self.subreaper:
            self.reap_strays()
        self.open_gates()

    def _check_startup(self, child: Child) -> None:
        if child.worker_id is None and time.monotonic() - child.started > STARTUP_TIMEOUT:
            logger.error(
                "Worker process %s did not say it was ready within %ss; killing it.",
                child.pid,
                int(STARTUP_TIMEOUT),
            )
            child.signal(signal.SIGKILL)

    def _exited(self, child: Child, code: int) -> None:
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        clean = code in (0, RECYCLE_EXIT) and not child.overdue
        if not clean and child.worker_id is not None:
            self.lost.end_lost_attempts(child, how)
        if child.retiring or self.stopping or child.generation != self.generation:
            return
        index = child.index
        if code != RECYCLE_EXIT and not (code == 0 and self.burst):
            self.restarts[index] += 1  # it died (or was ended for a time limit): restarted
        if code == RECYCLE_EXIT or child.overdue:
            self.failures[index] = self.signal_deaths[index] = 0
            return  # replaced at once by manage_children
        if code == 0 and self.burst:
            self.done[index] = True  # it found nothing more to do
            return
        at_start = child.worker_id is None or time.monotonic() - child.started < STARTUP_WINDOW
        when = "before it was ready" if child.worker_id is None else "just after it started"
        if at_start and code < 0:
            # Killed (kill -9, the OOM killer, a stray signal): not the project failing to
            # import. The slot must not stay empty for a backoff's seconds, unless the
            # signal comes at every start (a C extension that crashes as it loads).
            self.signal_deaths[index] += 1
            if self.signal_deaths[index] <= SIGNAL_DEATHS_AT_ONCE:
                logger.error(
                    "Worker process %s was killed (%s) %s; starting another now.",
                    child.pid,
                    how,
                    when,
                )
                return
            delay = self._back_off(index)
            logger.error(
                "Worker process %s was killed (%s) %s, %s times in a row; starting another in %ss.",
                child.pid,
                how,
                when,
                self.signal_deaths[index],
                f"{delay:g}",
            )
            return
        if at_start:
            delay = self._back_off(index)
            logger.error(
                "Worker process %s exited (%s) %s; starting another in %ss. Its own error is "
                "above (a failing import, a setting, the database?).",
                child.pid,
                how,
                when,
                f"{delay:g}",
            )
            return
        self.failures[index] = self.signal_deaths[index] = 0
        logger.error("Worker process %s ended (%s); starting another.", child.pid, how)

    def _back_off(self, index: int) -> float:
        """The wait before the slot ``index`` starts a child again: 1 s, doubling, at most
        ``MAX_BACKOFF``."""
        self.failures[index] += 1
        delay = min(2.0 ** (self.failures[index] - 1), MAX_BACKOFF)
        self.start_after[index] = time.monotonic() + delay
        return delay
