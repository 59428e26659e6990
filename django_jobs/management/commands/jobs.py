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

from typing import Any

from django.core.management.base import CommandParser

from ... import cli, clock, operations
from ...checks import COMMAND_CHECK_TAGS
from ...cli import render
from ...cli.drain import drain
from ...engine.rows.fleet import paused_pairs
from ...mcp_server import serve
from ...observability.stats import queue_stats
from ...printable import printable
from ...search import search_from_options
from ...serialize import job_json
from ...states import JobState
from ..arguments import add_jobs_arguments
from ..json_command import JsonCommand
from ..parsing import ExactOptions


class Command(ExactOptions, JsonCommand):
    help = (
        "Operate the job queue: list, inspect, retry, cancel, resolve, drain, stats, kinds, "
        "schedules, wake, prune, enqueue, mcp. Exit status: 0 ok, 2 bad input, 3 not found, "
        "4 refused."
    )
    # The checks of a process that serves no URL, as runjobs (see checks.py).
    requires_system_checks = COMMAND_CHECK_TAGS

    def add_arguments(self, parser: CommandParser) -> None:
        add_jobs_arguments(parser, skip_checks=bool(self.requires_system_checks))

    # -- commands ---------------------------------------------------------------------------

    def do_list(self, options: dict[str, Any]) -> None:
        search = search_from_options(
            payload=options["payload"] or (),
            error=options["error"],
            since=options["since"],
            until=options["until"],
            worker=options["worker"],
        )
        rows = cli.job_rows(
            state=options["state"],
            kind=options["kind"],
            queue=options["queue"],
            limit=options["limit"],
            search=search,
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
