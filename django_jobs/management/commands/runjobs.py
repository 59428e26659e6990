"""``manage.py runjobs``: thin; the work is in ``django_jobs.engine.worker``.

Logging: ``-v 2`` lowers the ``django_jobs`` loggers to INFO, so the worker writes one line
as each job starts and one as it ends (``django_jobs.worker``). When the project's ``LOGGING``
gives ``django_jobs`` no handler, runjobs writes the lines to stderr itself; ``--log-format
json`` makes them one JSON object each (``observability.logs.JsonFormatter``), in place of the
project's handlers for ``django_jobs`` when it has some.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...checks import COMMAND_CHECK_TAGS
from ...clock import TEST_CLOCK_ENV, test_clock_file
from ...conf import jobs_settings
from ...engine.worker import Worker
from ...observability.logs import JsonFormatter
from ..parsing import ExactOptions
from ..readiness import missing_migrations

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
            "line (-v 2 adds a line per job start and end).",
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

    def handle(self, *args: Any, **options: Any) -> None:
        engine = options["engine"]
        if engine not in jobs_settings.engine_names():
            raise CommandError(
                f"Unknown engine {engine!r}. JOBS['ENGINES'] defines: "
                f"{', '.join(jobs_settings.engine_names())}."
            )
        concurrency = options["concurrency"]
        if concurrency is not None and concurrency < 1:
            raise CommandError("--concurrency must be at least 1.")
        missing = missing_migrations(jobs_settings.DATABASE)
        if missing:
            raise CommandError(f"{missing} Then start the worker again.")
        configure_logging(options["verbosity"], options["log_format"])
        queues = [q.strip() for q in options["queues"].split(",") if q.strip()]
        worker = Worker(
            engine=engine,
            queues=queues or None,
            concurrency=concurrency,
            burst=options["burst"],
            scheduler=not options["no_scheduler"],
            name=options["name"] or None,
        )
        worker.install_signal_handlers()
        if options["verbosity"] >= 1:
            if test_clock_file() is not None:
                # Said at every start, so that nobody mistakes a testing run for a real one.
                self.stdout.write(
                    f"runjobs: the clock is read from {test_clock_file()} ({TEST_CLOCK_ENV})",
                    ending="\n",
                )
            self.stdout.write(f"runjobs: worker {worker.worker_id} ready", ending="\n")
            self.stdout.flush()
        code = worker.run()
        if code:
            raise SystemExit(code)


def configure_logging(verbosity: int, log_format: str) -> None:
    """Where and how the ``django_jobs`` log lines go in this process (see the docstring)."""
    if verbosity < 1:
        return
    jobs_logger = logging.getLogger("django_jobs")
    if verbosity >= 2 and jobs_logger.getEffectiveLevel() > logging.INFO:
        jobs_logger.setLevel(logging.INFO)  # the per-job lines, asked for by -v 2
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
        logging.basicConfig(
            level=logging.INFO if verbosity >= 2 else logging.WARNING, format=TEXT_FORMAT
        )
