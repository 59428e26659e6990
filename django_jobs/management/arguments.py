"""The arguments of ``manage.py jobs``: one subcommand each, with its options.

Every subcommand takes ``--json`` and Django's common options (``add_common_options``), so
that they may follow the command (``jobs list --settings=x``), as MCP client configurations
write them.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandParser

from .. import cli
from ..states import JobState, StepState

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


def add_jobs_arguments(parser: CommandParser, *, skip_checks: bool) -> None:
    """The subcommands of ``manage.py jobs`` on ``parser``; ``skip_checks``: the command runs
    system checks, so its subcommands accept ``--skip-checks``."""
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
        "--payload",
        action="append",
        metavar="PATH=VALUE",
        help="Only jobs whose payload holds VALUE at PATH (dotted: user.id=42); repeat to "
        "require several (docs/operating.md, searching jobs).",
    )
    sub.add_argument("--error", metavar="TEXT", help="Only jobs whose error contains TEXT.")
    sub.add_argument(
        "--since",
        metavar="WHEN",
        help="Only jobs created at or after WHEN: ISO 8601 or a duration back (1h, 7d).",
    )
    sub.add_argument("--until", metavar="WHEN", help="Only jobs created before WHEN (as --since).")
    sub.add_argument("--worker", metavar="NAME", help="Only jobs the worker NAME ran last.")
    sub.add_argument("--limit", type=LIMIT, default=100, help="At most this many, 1 to 1000 (100).")

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
        add_common_options(sub, skip_checks=skip_checks)
