"""A command of subcommands that answers in JSON with ``--json``: ``manage.py jobs``.

Each subcommand is a ``do_<name>`` method that prints through ``emit``. With ``--json``
exactly one JSON document goes to stdout, an error too (``{"error": {"code", "message"}}``):
a usage error (exit status 2), a refusal of the engine (``JobsError``, its exit status, see
``django_jobs.cli``), a failed system check or an unexpected error (exit status 1); progress
lines go to stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, SystemCheckError
from django.db import DatabaseError

from .. import cli
from ..conf import jobs_settings
from ..exceptions import JobsError
from ..printable import printable
from .readiness import missing_migrations


def _plain(text: str) -> str:
    return text


class JsonCommand(BaseCommand):
    """Runs the ``do_<command>`` method the parsed ``command`` names; ``--json`` makes every
    answer and every error one JSON document on stdout."""

    as_json: bool
    verbosity: int

    def run_from_argv(self, argv: list[str]) -> None:
        if "--json" in argv[2:]:
            self._usage_error_as_json(argv)
        super().run_from_argv(argv)

    def _usage_error_as_json(self, argv: list[str]) -> None:
        """With --json, a usage error is printed as the JSON error document, exit status 2.

        The arguments are parsed once before Django's own parse: a parser not marked as
        called from the command line raises ``CommandError`` instead of printing usage text.
        """
        parser = self.create_parser(argv[0], argv[1])
        try:
            parser.parse_args(argv[2:])
        except CommandError as exc:
            message = str(exc).removeprefix("Error: ")
            self.stdout.write(cli.json_text(cli.error_json(cli.BAD_INPUT, message)))
            self.stdout.flush()
            sys.exit(cli.EXIT_BAD_INPUT)

    def handle(self, *args: Any, **options: Any) -> None:
        self.as_json = options.get("json", False)
        self.verbosity = options["verbosity"]
        try:
            getattr(self, "do_" + options["command"])(options)
        except JobsError as exc:
            if self.as_json:
                self.json_error(exc.code, exc.message, cli.exit_code(exc))
            # The message may quote a job's text (a step name, a kind): escaped, like all output.
            raise CommandError(
                printable(f"{exc.code}: {exc.message}"), returncode=cli.exit_code(exc)
            ) from exc

    def execute(self, *args: Any, **options: Any) -> Any:
        """Django's ``execute`` (system checks, then ``handle``); under --json, an unexpected
        error is also the JSON error document (``INTERNAL_ERROR``, or ``SYSTEM_CHECK`` when a
        system check failed), then the traceback or the checks' report on stderr, exit 1."""
        try:
            return super().execute(*args, **options)
        except (JobsError, CommandError) as exc:
            if options.get("json") and isinstance(exc, SystemCheckError):
                self._print_error(cli.SYSTEM_CHECK, str(exc).strip())
            raise
        except Exception as exc:
            # "no such table": say what to run rather than show the database's traceback.
            missing = (
                missing_migrations(jobs_settings.DATABASE)
                if isinstance(exc, DatabaseError)
                else None
            )
            if missing:
                if options.get("json"):
                    self._print_error(cli.NOT_MIGRATED, missing)
                raise CommandError(missing) from exc
            if options.get("json"):
                self._print_error(cli.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            raise

    def _print_error(self, code: str, message: str) -> None:
        self.stdout.write(cli.json_text(cli.error_json(code, message)))
        self.stdout.flush()

    def json_error(self, code: str, message: str, status: int) -> None:
        """Print the JSON error document on stdout and end with ``status``, nothing on stderr.

        In-process (``call_command``) it raises ``CommandError`` with that ``returncode``
        after printing, as every error of a command does.
        """
        self._print_error(code, message)
        if getattr(self, "_called_from_command_line", False):
            sys.exit(status)
        raise CommandError(printable(f"{code}: {message}"), returncode=status)

    # -- output -----------------------------------------------------------------------------

    def emit(self, data: Any, text: Callable[[], str]) -> None:
        """Print ``data`` as JSON with --json, otherwise the human ``text()``.

        ``text()`` escapes the job text it shows (``printable``); JSON escapes C0 controls in
        strings, and ``cli.json_text`` the rest (DEL, C1, bidi controls, lone surrogates).
        """
        if self.as_json:
            self.stdout.write(cli.json_text(data))
        else:
            self.stdout.write(text())

    def progress(self, line: str) -> None:
        if self.verbosity >= 1:
            self.stderr.write(line, style_func=_plain)
            self.stderr.flush()
