"""The supervisor's templates over the generations: one started on demand per generation, heard,
reaped, started again, and told to end as the supervisor stops.

A template (``engine.template``; ``engine.forking`` is the supervisor's side of one) forks the
children of its generation. One that dies is started again: at once if a signal killed it
before it was ready, with backoff if it exited by itself (a failing import); one that will not
fork (``N``), or dies ``TEMPLATE_DEATHS`` times in its generation, leaves the generation's
children to start as new interpreters, and the parent says so. Its forked children are the
template's to reap (``X``); those of a dead template are the supervisor's as their subreaper,
which also reaps any stray descendant handed to it (``reap_strays``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time

from .children import MAX_BACKOFF, STARTUP_TIMEOUT, Child
from .forking import ForkedProcess, Template

logger = logging.getLogger("django_jobs.worker")

#: Deaths of a generation's ready template after which its children start as new interpreters.
TEMPLATE_DEATHS = 3
#: Seconds a template has to exit once told to, as the supervisor stops, before SIGKILL.
TEMPLATE_EXIT_WAIT = 5.0


class TemplateKeeper:
    """The templates of a supervisor (``Supervisor`` sets every attribute in ``__init__``)."""

    child_argv: list[str]  # a worker process's command
    generation: int  # the current one: SIGHUP and ``--reload`` start the next
    stopping: bool
    children: list[Child]  # the worker processes of every generation still running
    #: The templates (``engine.forking``): the current generation's, and older ones whose
    #: children still run.
    templates: list[Template]
    #: True: this generation's children start as new interpreters (no template).
    interpreters: bool
    template_failures: int  # the current generation's templates dead before ready
    template_deaths: int  # ... and after it
    template_after: float  # monotonic time a template may be started again
    subreaper: bool  # this process reaps the orphans of its descendants (Linux)

    def current_template(self) -> Template | None:
        """This generation's template, started if there is none (and it may be started now)."""
        for template in self.templates:
            if template.generation == self.generation and not template.closing:
                return template
        if time.monotonic() < self.template_after:
            return None
        try:
            template = Template.start(self._template_argv(), self.generation)
        except OSError as exc:
            logger.error("Could not start a template process (%s); trying again in 5s.", exc)
            self.template_after = time.monotonic() + 5.0
            return None
        self.templates.append(template)
        return template

    def _template_argv(self) -> list[str]:
        argv = list(self.child_argv)
        if "--no-scheduler" not in argv:
            argv.append("--no-scheduler")  # the template fires nothing; each request says
        return argv

    def read_templates(self) -> None:
        for template in self.templates:
            for words in template.read():
                self._heard_template(template, words)

    def _heard_template(self, template: Template, words: list[str]) -> None:
        verb, args = words[0], words[1:]
        if verb == "T":
            template.ready = True
            if template.generation == self.generation:
                self.template_failures = 0
            logger.info(
                "Template of generation %s ready (pid %s) in %.1fs: worker processes are "
                "forked from it.",
                template.generation,
                template.pid,
                time.monotonic() - template.started,
            )
        elif verb == "N":
            template.refused = " ".join(args) or "no reason given"
            template.close()
            if template.generation == self.generation and not self.interpreters:
                self.interpreters = True
                logger.warning(
                    "Worker processes cannot be forked from the template (pid %s): %s. "
                    "Starting each as a new interpreter instead (about a second each).",
                    template.pid,
                    template.refused,
                )
        elif verb == "P" and len(args) == 2:
            slot, pid = int(args[0]), int(args[1])
            process = ForkedProcess(pid, template)
            asked = template.asked
            if asked is None or asked[0] != slot:
                # Asked, then the template was closed (stopping): not wanted any more.
                process.send_signal(signal.SIGTERM)
                template.children[pid] = process
                return
            template.asked = None
            template.children[pid] = process
            child = Child(
                slot, template.generation, process, asked[1], started=asked[2], gate=asked[3]
            )
            self.children.append(child)
            if self.stopping:
                child.retiring = True
                child.signal(signal.SIGTERM)
        elif verb == "X" and len(args) == 2:
            forked = template.children.pop(int(args[0]), None)
            if forked is not None:
                forked.returncode = int(args[1])

    def reap_templates(self) -> None:
        now = time.monotonic()
        for template in list(self.templates):
            code = template.process.poll()
            if code is None:
                if not template.ready and now - template.started > STARTUP_TIMEOUT:
                    logger.error(
                        "The template (pid %s) did not say it was ready within %ss; killing it.",
                        template.pid,
                        int(STARTUP_TIMEOUT),
                    )
                    template.signal(signal.SIGKILL)
                continue
            for words in template.read():  # its last lines: the exits it reaped
                self._heard_template(template, words)
            template.exit_code = code
            self.templates.remove(template)
            for child in self.children:
                if isinstance(child.process, ForkedProcess) and child.process.template is template:
                    # SIGTERM reached it as its template died (``PR_SET_PDEATHSIG``): it
                    # finishes its jobs and exits; a new one takes its slot meanwhile.
                    child.retiring = True
            self._template_exited(template, code)
            template.forget()

    def _template_exited(self, template: Template, code: int) -> None:
        """A template exited: at its end (closed), or as it started (a failing import), or
        later (killed): started again, with backoff for the one that fails by itself."""
        if template.closing or self.stopping or template.generation != self.generation:
            return
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        if not template.ready:
            if code < 0:
                logger.error(
                    "The template (pid %s) was killed (%s) before it was ready; starting "
                    "another now.",
                    template.pid,
                    how,
                )
                return
            self.template_failures += 1
            delay = min(2.0 ** (self.template_failures - 1), MAX_BACKOFF)
            self.template_after = time.monotonic() + delay
            logger.error(
                "The worker processes' template (pid %s) exited (%s) before it was ready; "
                "starting another in %ss. Its own error is above (a failing import, a "
                "setting, the database?).",
                template.pid,
                how,
                f"{delay:g}",
            )
            return
        self.template_deaths += 1
        if self.template_deaths >= TEMPLATE_DEATHS:
            self.interpreters = True
            logger.error(
                "The worker processes' template (pid %s) died (%s), %s times in this "
                "generation: starting each worker process as a new interpreter instead "
                "(about a second each).",
                template.pid,
                how,
                self.template_deaths,
            )
            return
        logger.error(
            "The worker processes' template (pid %s) died (%s); starting another. Its "
            "worker processes finish their jobs and are replaced.",
            template.pid,
            how,
        )

    def reap_strays(self) -> None:
        """As a subreaper, this process adopts orphaned descendants (a job's own subprocess
        left behind): reap those that exited, leaving its known children to their owners."""
        if not hasattr(os, "waitid"):
            return
        known = {t.pid for t in self.templates} | {c.pid for c in self.children}
        for _ in range(64):
            try:
                waitable = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if waitable is None or waitable.si_pid in known or waitable.si_pid == 0:
                return  # none, or one of ours: its own poll reads it
            try:
                os.waitpid(waitable.si_pid, os.WNOHANG)
            except ChildProcessError:
                return

    def end_templates(self) -> None:
        """As the supervisor stops: each template is told so and exits once its children
        have; one still there after ``TEMPLATE_EXIT_WAIT`` is killed."""
        for template in self.templates:
            template.close()
        deadline = time.monotonic() + TEMPLATE_EXIT_WAIT
        for template in self.templates:
            try:
                template.process.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                template.signal(signal.SIGKILL)
                template.process.wait()
            template.forget()
        self.templates.clear()
