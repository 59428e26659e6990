"""``manage.py runjobs``: thin; the work is in ``django_jobs.engine.worker.worker`` (one process's
threads) and ``django_jobs.engine.worker.supervisor`` (``--processes N``: a parent over N of them).

``--processes`` (default 1): the parent starts a template per generation as ``runjobs
--processes 0`` with the same options and its end of a socket pair (``--child-template-fd``),
which forks each child (``engine.template``); or, without a template, each child as such a
command with a pipe to report on (``--child-report-fd``). Neither option is for use by hand.

Logging: at the default verbosity the worker writes one line per job's outcome (``job.ended``
on ``django_jobs.worker``, at INFO: kind, id, outcome, duration, attempt) and what it does
(start, signals, paused queues); ``-v 2`` adds a line as each job starts (DEBUG) and the
other ``django_jobs`` loggers' INFO lines; ``-v 0`` writes none of them. The verbosity sets
the ``django_jobs.worker`` logger's level in this process over the project's ``LOGGING``, as a
command-line flag does. When the project's ``LOGGING`` gives ``django_jobs`` no handler,
runjobs writes the lines to stderr itself (``observability.logs.TextFormatter``: a line written
while a job runs names its ``job_id``, ``kind``, ``attempt`` and ``queue``, which every record
made then carries, ``engine.observe.records``); ``--log-format json`` makes them one JSON object
each (``observability.logs.JsonFormatter``, the job's fields among its keys), in place of the
project's handlers for ``django_jobs`` when it has some.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from ...checks import COMMAND_CHECK_TAGS
from ...clock import TEST_CLOCK_ENV, test_clock_file
from ...conf import jobs_settings
from ...engine.observe import tracing
from ...engine.rows import fleet
from ...engine.worker.child import ParentChannel
from ...engine.worker.supervisor import Supervisor
from ...engine.worker.template import serve as serve_as_template
from ...engine.worker.worker import Worker
from ...observability.logs import JsonFormatter, TextFormatter
from ...store import get_store
from ..parsing import ExactOptions
from ..readiness import missing_migrations, pool_too_small


class Command(ExactOptions, BaseCommand):
    help = "Run the jobs of one engine until SIGTERM/SIGINT (or, with --burst, until idle)."
    # The checks of a process that serves no URL (see checks.py).
    requires_system_checks = COMMAND_CHECK_TAGS

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--engine", default="default", help="The engine to run.")
        parser.add_argument("--queues", default="", help="Comma-separated queues (default: all).")
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="Jobs run at once (default: the engine's concurrency).",
        )
        parser.add_argument(
            "--burst", action="store_true", help="Run until nothing is due, then exit 0."
        )
        parser.add_argument(
            "--log-format",
            choices=["text", "json"],
            default="text",
            help="How runjobs writes its log lines on stderr: text, or one JSON object per "
            "line (a line per job's outcome; -v 2 adds one as each starts; -v 0: none).",
        )
        parser.add_argument(
            "--name",
            default=None,
            metavar="NAME",
            help="The worker's name in the workers list (default: host:pid).",
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="Do not fire cron schedules from this process.",
        )
        parser.add_argument(
            "--processes",
            default="1",
            metavar="N",
            help="Worker processes under one supervising parent, each with --concurrency "
            "threads (default 1; 'auto': one per CPU; 0: run jobs in this process, where only "
            "soft time limits exist).",
        )
        parser.add_argument(
            "--max-jobs-per-child",
            type=int,
            default=None,
            metavar="M",
            help="A worker process that has run M jobs finishes and is replaced.",
        )
        parser.add_argument(
            "--max-memory-per-child",
            default=None,
            metavar="SIZE",
            help="A worker process whose resident memory is above SIZE after a job (512MB, "
            "2GB; 1MB = 1024 KB) finishes and is replaced.",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Start new worker processes when a Python file of the project changes "
            "(development, as runserver does).",
        )
        parser.add_argument("--child-report-fd", type=int, default=None, help=argparse.SUPPRESS)
        parser.add_argument("--child-template-fd", type=int, default=None, help=argparse.SUPPRESS)
        parser.add_argument("--child-gate-fd", type=int, default=None, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        engine = options["engine"]
        if engine not in jobs_settings.engine_names():
            raise CommandError(
                f"Unknown engine {engine!r}. JOBS['ENGINES'] defines: "
                f"{', '.join(jobs_settings.engine_names())}."
            )
        if options["name"]:
            problem = fleet.name_problem(options["name"], engine)
            if problem:
                raise CommandError(problem)
        concurrency = options["concurrency"]
        if concurrency is not None and concurrency < 1:
            raise CommandError("--concurrency must be at least 1.")
        missing = missing_migrations(jobs_settings.DATABASE)
        if missing:
            raise CommandError(f"{missing} Then start the worker again.")
        short = pool_too_small(
            jobs_settings.DATABASE, concurrency or jobs_settings.engine_concurrency(engine)
        )
        if short:
            raise CommandError(short)
        processes = parse_processes(options["processes"])
        max_jobs = options["max_jobs_per_child"]
        if max_jobs is not None and max_jobs < 1:
            raise CommandError("--max-jobs-per-child must be at least 1.")
        max_memory = (
            parse_size(options["max_memory_per_child"])
            if options["max_memory_per_child"] is not None
            else None
        )
        child_fd = options["child_report_fd"]
        template_fd = options["child_template_fd"]
        if processes == 0 and child_fd is None and template_fd is None:
            for flag, value in (
                ("--max-jobs-per-child", max_jobs),
                ("--max-memory-per-child", max_memory),
                ("--reload", options["reload"] or None),
            ):
                if value is not None:
                    raise CommandError(
                        f"{flag} needs worker processes: use --processes 1 or more "
                        "(--processes 0 runs the jobs in this process)."
                    )
        configure_logging(options["verbosity"], options["log_format"])
        queues = [q.strip() for q in options["queues"].split(",") if q.strip()]
        if options["verbosity"] >= 1 and test_clock_file() is not None:
            # Said at every start, so that nobody mistakes a testing run for a real one.
            self.stdout.write(
                f"runjobs: the clock is read from {test_clock_file()} ({TEST_CLOCK_ENV})",
                ending="\n",
            )
        if processes > 0 and child_fd is None and template_fd is None:
            self._supervise(options, processes, engine, queues, concurrency, max_jobs, max_memory)
            return

        def run_worker(report_fd: int | None, gate_fd: int | None, scheduler: bool) -> int:
            worker = Worker(
                engine=engine,
                queues=queues or None,
                concurrency=concurrency,
                burst=options["burst"],
                scheduler=scheduler,
                name=options["name"] or None,
                fleet_row=report_fd is None,
                parent=ParentChannel(report_fd, gate_fd) if report_fd is not None else None,
                max_jobs=max_jobs,
                max_memory=max_memory,
            )
            worker.install_signal_handlers()
            if options["verbosity"] >= 1:
                self.stdout.write(f"runjobs: worker {worker.worker_id} ready", ending="\n")
                self.stdout.flush()
            return worker.run()

        if template_fd is not None:
            # This process imported the project for its generation: it forks the worker
            # processes from here on (``engine.template``), each running ``run_worker``.
            code = serve_as_template(template_fd, run_worker, preload_worker)
        else:
            code = run_worker(child_fd, options["child_gate_fd"], not options["no_scheduler"])
        if code:
            raise SystemExit(code)

    def _supervise(
        self,
        options: dict[str, Any],
        processes: int,
        engine: str,
        queues: list[str],
        concurrency: int | None,
        max_jobs: int | None,
        max_memory: int | None,
    ) -> None:
        name = options["name"] or fleet.default_name()
        threads = concurrency or jobs_settings.engine_concurrency(engine)
        argv = child_command(options, name=name, concurrency=threads)
        if max_jobs is not None:
            argv += ["--max-jobs-per-child", str(max_jobs)]
        if max_memory is not None:
            argv += ["--max-memory-per-child", str(max_memory)]
        supervisor = Supervisor(
            child_argv=argv,
            processes=processes,
            name=name,
            engine=engine,
            queues=queues or None,
            concurrency=threads,
            burst=options["burst"],
            scheduler=not options["no_scheduler"],
            reload=options["reload"],
        )
        if options["verbosity"] >= 1:
            self.stdout.write(
                f"runjobs: supervisor {name} (pid {os.getpid()}) ready: {processes} "
                f"process(es) x {threads} thread(s)",
                ending="\n",
            )
            self.stdout.flush()
        code = supervisor.run()
        if code:
            raise SystemExit(code)


def preload_worker() -> None:
    """In a template, before it forks: what a worker process would import or read on first use
    (the store, the tracing API, the database driver's lazy imports, with one read), so that
    each forked process is ready in milliseconds. A database that cannot be reached now is
    no reason to stop: each worker process retries on its own."""
    get_store(jobs_settings.DATABASE)
    tracing.preload()
    try:
        fleet.paused_queues(using=jobs_settings.DATABASE)
    except DatabaseError:
        pass


def parse_processes(value: str) -> int:
    """``--processes``: a count, or ``auto`` (one per CPU this process may run on)."""
    if value == "auto":
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise CommandError(f"--processes {value!r}: give a number (0 or more) or 'auto'.")
    return count


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_size(value: str) -> int:
    """``--max-memory-per-child``: bytes from ``512MB``, ``1.5GB``, ``800M``, ``1048576``."""
    match = _SIZE.fullmatch(value)
    if match is None or float(match[1]) <= 0:
        raise CommandError(
            f"--max-memory-per-child {value!r}: give a size such as 512MB or 2GB "
            "(KB, MB, GB: powers of 1024)."
        )
    unit = (match[2] or "").lower()[:1]
    return int(float(match[1]) * _UNITS[unit])


def child_command(options: dict[str, Any], *, name: str, concurrency: int) -> list[str]:
    """The command line of one worker process: this runjobs, with --processes 0.

    Run as ``python -m django`` with the project's settings module and the directory of
    manage.py first on its path, as this process has them.
    """
    argv = [sys.executable, "-m", "django", "runjobs", "--processes", "0"]
    argv += ["--settings", settings.SETTINGS_MODULE]
    argv += ["--engine", options["engine"], "--concurrency", str(concurrency), "--name", name]
    if options["queues"]:
        argv += ["--queues", options["queues"]]
    argv += ["--verbosity", str(options["verbosity"]), "--log-format", options["log_format"]]
    if options["burst"]:
        argv.append("--burst")
    if options["no_scheduler"]:
        argv.append("--no-scheduler")
    argv += ["--pythonpath", os.path.abspath(sys.path[0] or os.getcwd())]
    return argv


def configure_logging(verbosity: int, log_format: str) -> None:
    """Where and how the ``django_jobs`` log lines go in this process (see the docstring)."""
    jobs_logger = logging.getLogger("django_jobs")
    worker_logger = logging.getLogger("django_jobs.worker")
    if verbosity < 1:
        worker_logger.setLevel(logging.WARNING)  # -v 0: no line per job
        return
    # -v 1: a line per outcome (INFO); -v 2: and one per start (DEBUG).
    worker_logger.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
    if verbosity >= 2 and jobs_logger.getEffectiveLevel() > logging.INFO:
        jobs_logger.setLevel(logging.INFO)  # the other loggers' lines, asked for by -v 2
    if log_format == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
        for old in list(jobs_logger.handlers):
            jobs_logger.removeHandler(old)
        jobs_logger.addHandler(handler)
        jobs_logger.propagate = False  # each line once, as JSON
        if jobs_logger.level == logging.NOTSET:
            jobs_logger.setLevel(logging.WARNING)
    elif not jobs_logger.handlers:
        # The root logger's handler, unless the project configured one (then it formats).
        handler = logging.StreamHandler()
        handler.setFormatter(TextFormatter())
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
