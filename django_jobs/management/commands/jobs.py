"""``manage.py jobs <command>``: thin; the work is in ``django_jobs.cli`` and ``operations``.

Exit status: 0 ok, 1 unexpected error, 2 bad usage or input, 3 unknown job id or kind,
4 refused by the job's state (see ``django_jobs.cli``). ``--json`` prints exactly one JSON
document on stdout, an error too (``{"error": {"code", "message"}}``, with the same exit
status); progress lines go to stderr.

Django's common options (``--settings``, ``--pythonpath``, ``-v``, ``--traceback``,
``--no-color``, ``--force-color``, ``--skip-checks``) are accepted before the command and after
it (``jobs list --settings=x``), as MCP client configurations write them. ``manage.py`` reads
``--settings`` and ``--pythonpath`` wherever they stand before loading the settings.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    SystemCheckError,
)
from django.db import DatabaseError

from ... import cli, clock, operations
from ...checks import COMMAND_CHECK_TAGS
from ...cli import render
from ...cli.drain import drain
from ...conf import jobs_settings
from ...engine.fleet import paused_pairs
from ...exceptions import JobsError
from ...mcp_server import serve
from ...observability.stats import queue_stats
from ...printable import printable
from ...serialize import job_json
from ...states import JobState, StepState
from ..parsing import ExactOptions
from ..readiness import missing_migrations


def _plain(text: str) -> str:
    return text


JOB_ID = cli.bounded(1, cli.MAX_ID, what="a job id")
LIMIT = cli.bounded(1, cli.MAX_LIMIT, what="a limit")
BATCH_SIZE = cli.bounded(1, 100_000, what="a batch size")
PRIORITY = cli.bounded(-32768, 32767, what="a priority")  # Job.priority is a small integer


def add_common_options(parser: argparse.ArgumentParser, *, skip_checks: bool) -> None:
    """Django's common options, on a subcommand's parser, so they may follow the command.

    Their defaults are ``SUPPRESS``: an option given only before the command (``jobs -v 2
    list``) keeps its value, as a subparser copies only what it parsed.
    """
    group = parser.add_argument_group("common options (also accepted before the command)")
    hidden = argparse.SUPPRESS
    group.add_argument(
        "-v",
        "--verbosity",
        type=int,
        choices=[0, 1, 2, 3],
        default=hidden,
        help="0 minimal, 1 normal (progress on stderr), 2 and 3 verbose.",
    )
    group.add_argument(
        "--settings", default=hidden, help="The settings module, e.g. site.settings."
    )
    group.add_argument("--pythonpath", default=hidden, help="A directory to add to sys.path.")
    group.add_argument(
        "--traceback", action="store_true", default=hidden, help="Show a traceback on errors."
    )
    group.add_argument(
        "--no-color", action="store_true", default=hidden, help="Don't colorize the output."
    )
    group.add_argument(
        "--force-color", action="store_true", default=hidden, help="Force colorized output."
    )
    if skip_checks:
        group.add_argument(
            "--skip-checks", action="store_true", default=hidden, help="Skip system checks."
        )


class Command(ExactOptions, BaseCommand):
    help = (
        "Operate the job queue: list, inspect, retry, cancel, resolve, drain, stats, kinds, "
        "schedules, wake, prune, enqueue, mcp. Exit status: 0 ok, 2 bad input, 3 not found, "
        "4 refused."
    )
    # The checks of a process that serves no URL, as runjobs (see checks.py).
    requires_system_checks = COMMAND_CHECK_TAGS

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

        def command(name: str, help_text: str, *, json_help: str | None = None) -> Any:
            sub = commands.add_parser(name, help=help_text, description=help_text)
            sub.add_argument(
                "--json", action="store_true", help=json_help or "Print JSON instead of a table."
            )
            return sub

        sub = command("list", "The newest jobs first.", json_help="Print an array of job JSON.")
        sub.add_argument("--state", help=f"Only jobs in this state ({', '.join(JobState.values)}).")
        sub.add_argument("--kind", help="Only jobs of this kind.")
        sub.add_argument("--queue", help="Only jobs on this queue.")
        sub.add_argument(
            "--limit", type=LIMIT, default=100, help="At most this many, 1 to 1000 (100)."
        )

        sub = command(
            "inspect",
            "One job: its row, steps trace and log.",
            json_help="Print the job JSON with steps and log.",
        )
        sub.add_argument("id", type=JOB_ID, help="The job id.")

        sub = command("retry", "Queue a failed, blocked or cancelled job again.")
        sub.add_argument("id", type=JOB_ID, help="The job id.")
        sub.add_argument(
            "--from-step",
            metavar="NAME",
            help="Forget this step and the ones after it, so they run again.",
        )
        sub.add_argument(
            "--children",
            action="store_true",
            help="Also retry its failed and cancelled children, down the tree; the job waits "
            "for them again.",
        )

        sub = command("cancel", "Cancel a job (a running one stops at its next check).")
        sub.add_argument("id", type=JOB_ID, help="The job id.")

        sub = command("resolve", "Settle a step left unknown: completed (with --value) or failed.")
        sub.add_argument("id", type=JOB_ID, help="The job id.")
        sub.add_argument("--step", required=True, metavar="NAME", help="The step's name.")
        sub.add_argument(
            "--as",
            dest="as_",
            required=True,
            choices=[StepState.COMPLETED.value, StepState.FAILED.value],
            help="What really happened.",
        )
        sub.add_argument("--value", metavar="JSON", help="The step's result, as JSON.")

        sub = command(
            "drain",
            "Run due jobs in this process; report what ran.",
            json_help="Print an array of job JSON, one per run.",
        )
        sub.add_argument(
            "--limit", type=LIMIT, default=32, help="Run at most this many, 1 to 1000 (32)."
        )
        sub.add_argument(
            "--queue",
            action="append",
            metavar="Q",
            help="Only this queue (repeat, or separate with commas).",
        )
        sub.add_argument("--engine", help="Only kinds of this engine (default: all).")

        command(
            "stats",
            "Counts per queue and state, oldest due age, pickup latency.",
            json_help="Print what GET stats/ returns.",
        )
        command(
            "kinds",
            "The manifest: every registered kind.",
            json_help="Print an array of describe() rows.",
        )
        command(
            "schedules",
            "Cron schedules and their next runs.",
            json_help="Print an array of schedules with next_runs.",
        )
        command("wake", "Re-ask every waiting job now.", json_help='Print {"woken": N}.')
        command(
            "workers",
            "The workers: host, pid, queues, processes x concurrency, heartbeat, state.",
            json_help="Print an array of worker rows (what GET workers/ returns).",
        )
        command(
            "queues",
            "The queues of each engine: paused or not, counts per state.",
            json_help="Print an array of queues (what GET queues/ returns).",
        )
        sub = command(
            "pause",
            "Pause a queue: no worker starts its jobs (running ones finish); enqueue goes on.",
            json_help="Print the pause as JSON.",
        )
        sub.add_argument("queue", help="The queue to pause.")
        sub.add_argument("--engine", default="default", help="Its engine (default).")
        sub.add_argument("--reason", default="", help="Why, for the other operators.")
        sub = command(
            "resume",
            "Resume a paused queue: workers start its jobs again.",
            json_help='Print {"queue", "engine", "paused": false, "resumed"}.',
        )
        sub.add_argument("queue", help="The queue to resume.")
        sub.add_argument("--engine", default="default", help="Its engine (default).")

        sub = command(
            "prune",
            "Delete ended jobs (succeeded, failed, cancelled) and their steps.",
            json_help="Print {cutoff, jobs, steps, more}.",
        )
        sub.add_argument(
            "--older-than",
            metavar="DURATION",
            help='Ended more than this long ago, e.g. "30d" (default: JOBS["RETENTION"]).',
        )
        sub.add_argument(
            "--batch-size",
            type=BATCH_SIZE,
            default=cli.DEFAULT_BATCH_SIZE,
            help=f"Jobs deleted per transaction, 1 to 100000 ({cli.DEFAULT_BATCH_SIZE}).",
        )
        sub.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

        sub = commands.add_parser(
            "mcp",
            help=(
                "Serve the introspection as MCP tools on stdio (the mcp extra: pip install -e "
                "'.[mcp]' in a checkout, other forms in "
                "docs/getting-started.md#install-the-app-in-your-project)."
            ),
            description=(
                "A Model Context Protocol server on stdin/stdout: inspect_queues, inspect_job, "
                "list_jobs, dead_letters, kinds, explain_claim, workers, queues; each returns the "
                "JSON of the "
                "matching --json command. Read-only unless --allow-actions."
            ),
        )
        sub.add_argument(
            "--allow-actions",
            action="store_true",
            help="Also serve the retry, cancel, wake, pause_queue and resume_queue tools.",
        )

        sub = command(
            "enqueue",
            "Enqueue a job of a kind, as an operator.",
            json_help="Print the job JSON (with deduped).",
        )
        sub.add_argument("kind", help="The kind to enqueue.")
        sub.add_argument("--payload", metavar="JSON", help="The payload, as JSON.")
        sub.add_argument("--queue", help="Another queue than the kind's.")
        sub.add_argument("--priority", type=PRIORITY, help="Lower runs first (-32768 to 32767).")
        sub.add_argument("--delay", metavar="DURATION", help='Run after this long, e.g. "5m".')

        for sub in commands.choices.values():
            add_common_options(sub, skip_checks=bool(self.requires_system_checks))

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

    # -- commands ---------------------------------------------------------------------------

    def do_list(self, options: dict[str, Any]) -> None:
        rows = cli.job_rows(
            state=options["state"],
            kind=options["kind"],
            queue=options["queue"],
            limit=options["limit"],
        )
        self.emit(rows, lambda: render.render_jobs(rows, clock.now()))

    def do_inspect(self, options: dict[str, Any]) -> None:
        detail = operations.inspect_job(options["id"])

        def text() -> str:
            page = render.render_job(detail, clock.now())
            if detail.get("children"):
                tree = operations.children_tree(detail["id"])
                page += "\n\n" + render.render_tree(detail, tree)
            return page

        self.emit(detail, text)

    def do_retry(self, options: dict[str, Any]) -> None:
        row = operations.retry(
            options["id"], from_step=options["from_step"], children=options["children"]
        )
        if row["state"] == JobState.WAITING:
            words = f"waits for its retried children ({printable(row['wait_reason'] or '')})."
        else:
            words = (
                f"is queued again: attempt {row['attempts'] + 1} of up to {row['max_attempts']}."
            )
        self.emit(row, lambda: f"Job #{row['id']} ({printable(row['kind'])}) {words}")

    def do_cancel(self, options: dict[str, Any]) -> None:
        row = operations.cancel(options["id"])
        if row["state"] == JobState.RUNNING:
            text = (
                f"Cancellation of job #{row['id']} requested: it is running, and stops at "
                "its next ctx.check_cancelled()."
            )
        else:
            text = f"Job #{row['id']} ({printable(row['kind'])}) is cancelled."
        self.emit(row, lambda: text)

    def do_resolve(self, options: dict[str, Any]) -> None:
        value = cli.parse_json(options["value"], option="--value")
        row = operations.resolve(options["id"], options["step"], options["as_"], value)
        self.emit(
            row,
            lambda: (
                f"Step {printable(repr(options['step']))} of job #{row['id']} is {options['as_']}; "
                f"the job is {row['state']}."
            ),
        )

    def do_drain(self, options: dict[str, Any]) -> None:
        queues = [q.strip() for arg in options["queue"] or [] for q in arg.split(",") if q.strip()]
        limit = options["limit"]

        def report(n: int, job: Any) -> None:
            self.progress(f"ran {n}/{limit}: #{job.pk} {printable(job.kind)} -> {job.state}")

        engine = options["engine"]
        paused = paused_pairs(engine)  # what the drain passes over, as a worker does
        if paused:
            # Said, so that a drain that leaves jobs is never a surprise.
            names = ", ".join(f"{printable(q)} ({printable(e)})" for e, q in paused)
            self.progress(f"passing over paused queues: {names} (`jobs resume QUEUE` to run them)")
        ran = drain(limit=limit, queues=queues or None, engine=engine, progress=report)
        rows = [job_json(job) for job in ran]

        def text() -> str:
            if not rows:
                return "Nothing is due."
            counts: dict[str, int] = {}
            for row in rows:
                counts[row["state"]] = counts.get(row["state"], 0) + 1
            summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
            more = " (the limit stopped it; more may be due)" if len(rows) >= limit else ""
            table = render.render_jobs(rows, clock.now())
            return f"{table}\n\nRan {len(rows)} job(s): {summary}{more}."

        self.emit(rows, text)

    def do_stats(self, options: dict[str, Any]) -> None:
        stats = queue_stats()
        self.emit(stats, lambda: render.render_stats(stats))

    def do_kinds(self, options: dict[str, Any]) -> None:
        rows = operations.describe_kinds()
        self.emit(rows, lambda: render.render_kinds(rows))

    def do_schedules(self, options: dict[str, Any]) -> None:
        now = clock.now()
        rows = cli.schedules(now=now)
        self.emit(rows, lambda: render.render_schedules(rows, now))

    def do_wake(self, options: dict[str, Any]) -> None:
        result = cli.wake()
        self.emit(result, lambda: f"Woke {result['woken']} waiting job(s).")

    def do_workers(self, options: dict[str, Any]) -> None:
        rows = operations.workers()
        self.emit(rows, lambda: render.render_workers(rows))

    def do_queues(self, options: dict[str, Any]) -> None:
        rows = operations.queues()
        self.emit(rows, lambda: render.render_queues(rows))

    def do_pause(self, options: dict[str, Any]) -> None:
        row = operations.pause_queue(
            options["queue"], engine=options["engine"], reason=options["reason"]
        )
        self.emit(
            row,
            lambda: (
                f"Queue {printable(row['queue'])} ({printable(row['engine'])}) is paused: no "
                "worker starts its jobs until `jobs resume` (running ones finish)."
            ),
        )

    def do_resume(self, options: dict[str, Any]) -> None:
        row = operations.resume_queue(options["queue"], engine=options["engine"])
        words = "is resumed" if row["resumed"] else "was not paused"
        self.emit(
            row, lambda: f"Queue {printable(row['queue'])} ({printable(row['engine'])}) {words}."
        )

    def do_prune(self, options: dict[str, Any]) -> None:
        if options["dry_run"]:
            result = cli.prune_dry_run(options["older_than"])
            self.emit(
                result.as_json(),
                lambda: (
                    f"Would delete {result.jobs} ended job(s) and {result.steps} step(s) that "
                    f"ended before {result.cutoff.isoformat()}."
                ),
            )
            return
        result = cli.prune(
            options["older_than"],
            batch_size=options["batch_size"],
            progress=lambda done, total: self.progress(f"pruned {done}/{total}"),
        )
        self.emit(
            result.as_json(),
            lambda: (
                f"Deleted {result.jobs} ended job(s) and {result.steps} step(s) that ended before "
                f"{result.cutoff.isoformat()}."
            ),
        )

    def do_mcp(self, options: dict[str, Any]) -> None:
        serve(allow_actions=options["allow_actions"])  # McpMissing says how to install it

    def do_enqueue(self, options: dict[str, Any]) -> None:
        payload = cli.parse_json(options["payload"], option="--payload")
        job = cli.enqueue(
            options["kind"],
            payload,
            queue=options["queue"],
            priority=options["priority"],
            delay=options["delay"],
        )
        row = job_json(job, deduped=job.deduped)
        if job.deduped:
            text = (
                f"A live job with the same idempotency key exists: #{job.pk} "
                f"({printable(job.kind)}, {job.state}); nothing new was enqueued."
            )
        else:
            text = (
                f"Enqueued job #{job.pk} ({printable(job.kind)}) on queue "
                f"{printable(repr(job.queue))}."
            )
        self.emit(row, lambda: text)
