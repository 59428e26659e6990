"""What ``manage.py jobs`` does, apart from parsing arguments and printing.

Every function returns data (model rows or the JSON shapes of SPEC §7 and §9): this package
for reading and acting, ``drain`` for running due jobs in this process, and ``render`` for the
human tables. Errors are ``JobsError`` subclasses (or ``BadInput`` for a malformed argument);
``exit_code()`` maps each to the documented exit status.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from .. import clock
from ..conf import jobs_settings
from ..durations import format_duration, parse_duration
from ..engine.maintenance import DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE  # re-exported
from ..engine.maintenance import PruneResult, expired
from ..engine.maintenance import prune as prune_jobs
from ..engine.schedules import upcoming
from ..exceptions import (
    InvalidDuration,
    InvalidPayload,
    InvalidSchedule,
    JobDuplicate,
    JobNotFound,
    JobsError,
    NotCancellable,
    NotRetryable,
    OutboxNoTransaction,
    UnknownEngine,
    UnknownKind,
)
from ..kinds.registry import lookup
from ..models import Job, JobStep, Schedule
from ..operations import wake_waiting
from ..printable import printable, printable_json
from ..search import InvalidFilter, JobSearch
from ..serialize import job_json
from ..states import JobState

# --- exit codes ----------------------------------------------------------------------------

EXIT_OK = 0
"""The command did what it was asked."""
EXIT_ERROR = 1
"""Something unexpected (a database error, a bug); the message says what."""
EXIT_BAD_INPUT = 2
"""Bad usage or input: an unknown option, bad JSON, a bad duration or state, an invalid payload."""
EXIT_NOT_FOUND = 3
"""No job has this id, or no kind has this name."""
EXIT_REFUSED = 4
"""The job's state refuses the action: not retryable, not cancellable, no such step."""

MAX_LIMIT = 1000
"""The largest ``--limit`` (and MCP ``limit``) a command accepts: SPEC's 1..1000."""
MAX_ID = 2**63 - 1
"""The largest job id a column can hold; a larger one is refused before any query."""

BAD_INPUT = "BAD_INPUT"
"""The ``--json`` error code of a malformed argument, an argparse usage error included."""
INTERNAL_ERROR = "INTERNAL_ERROR"
"""The ``--json`` error code of an unexpected failure (exit status 1; the traceback follows on
stderr)."""
NOT_MIGRATED = "NOT_MIGRATED"
"""The ``--json`` error code of a database without django_jobs' migrations (exit status 1):
the message names them and says to run ``manage.py migrate``."""
SYSTEM_CHECK = "SYSTEM_CHECK"
"""The ``--json`` error code of a failed system check (exit status 1; the report follows on
stderr)."""

_EXIT_CODES: list[tuple[type[JobsError], int]] = [
    (JobNotFound, EXIT_NOT_FOUND),
    (UnknownKind, EXIT_NOT_FOUND),
    (NotRetryable, EXIT_REFUSED),
    (NotCancellable, EXIT_REFUSED),
    (JobDuplicate, EXIT_REFUSED),
    (OutboxNoTransaction, EXIT_REFUSED),
    (InvalidPayload, EXIT_BAD_INPUT),
    (InvalidDuration, EXIT_BAD_INPUT),
    (InvalidSchedule, EXIT_BAD_INPUT),
    (InvalidFilter, EXIT_BAD_INPUT),
    (UnknownEngine, EXIT_NOT_FOUND),
]


class BadInput(JobsError, ValueError):
    """An argument of the command is malformed."""

    code = "BAD_INPUT"


def exit_code(error: JobsError) -> int:
    """The exit status ``manage.py jobs`` uses for ``error``."""
    if isinstance(error, BadInput):
        return EXIT_BAD_INPUT
    for cls, code in _EXIT_CODES:
        if isinstance(error, cls):
            return code
    return EXIT_ERROR


def error_json(code: str, message: str) -> dict[str, Any]:
    """What ``--json`` prints for an error: ``{"error": {"code": ..., "message": ...}}``."""
    return {"error": {"code": code, "message": message}}


def bounded(low: int, high: int, *, what: str = "a number") -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` to ``high``, or a usage error that
    says which numbers are accepted (a huge number never reaches a query)."""

    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-")
        shown = text if len(text) <= 30 else text[:27] + "..."
        if not digits.isdigit():
            raise argparse.ArgumentTypeError(
                f"{printable(repr(shown))} is not {what}; give a whole number from {low} to {high}."
            )
        value = int(text) if len(digits) <= 30 else None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{shown} is out of range; give a whole number from {low} to {high}."
            )
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def check_limit(limit: int, *, name: str = "--limit") -> int:
    """``limit`` if it is within 1..MAX_LIMIT; ``BadInput`` saying the range otherwise."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise BadInput(
            f"{name} must be a whole number from 1 to {MAX_LIMIT}, not {_short(limit)}; "
            "to reach other jobs, filter by state, kind or queue."
        )
    return limit


def json_text(data: Any) -> str:
    """The JSON document ``--json`` prints for ``data`` (the MCP tools return the same).

    JSON escapes C0 controls in strings; ``printable_json`` escapes the rest (DEL, C1, bidi
    controls, lone surrogates), so a terminal shows job text without obeying it.
    """
    return printable_json(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def parse_json(text: str | None, *, option: str) -> Any:
    """Parse the JSON given to ``option``; None when the option was not given."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise BadInput(f"{option} is nested too deeply; flatten it.") from None
    except ValueError as exc:
        raise BadInput(
            f"{option} is not valid JSON ({exc}). Quote it for the shell, e.g. "
            f'{option} \'{{"video": "intro"}}\'.'
        ) from None


# --- reading ---------------------------------------------------------------------------------


def list_jobs(
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    limit: int = 100,
    search: JobSearch | None = None,
) -> list[Job]:
    """The newest jobs first, filtered like ``GET /`` (``search``: ``search_from_options``)."""
    if state is not None and state not in JobState.values:
        raise BadInput(f"--state {state!r} is not a job state; use one of: {_states()}.")
    check_limit(limit)
    jobs = Job.objects.using(jobs_settings.DATABASE).order_by("-id")
    if state is not None:
        jobs = jobs.filter(state=state)
    if kind is not None:
        jobs = jobs.filter(kind=kind)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    if search:
        jobs = search.apply(jobs, operator=True)
    return list(jobs[:limit])


def job_rows(
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    limit: int = 100,
    search: JobSearch | None = None,
) -> list[dict[str, Any]]:
    """What ``jobs list --json`` prints: the job JSON of ``list_jobs``."""
    jobs = list_jobs(state=state, kind=kind, queue=queue, limit=limit, search=search)
    return [job_json(job) for job in jobs]


def schedules(*, now: datetime | None = None, runs: int = 3) -> list[dict[str, Any]]:
    """Every schedule, as the API shows it, with its next ``runs`` occurrences."""
    now = now or clock.now()
    rows: list[dict[str, Any]] = []
    for item in Schedule.objects.using(jobs_settings.DATABASE).order_by("name"):
        row: dict[str, Any] = {
            "id": item.pk,
            "name": item.name,
            "cron": item.cron or None,
            "every": _duration(item.every),
            "tz": item.tz,
            "kind": item.kind,
            "payload": item.payload,
            "catch_up": item.catch_up,
            "enabled": item.enabled,
            "queue": item.queue,
            "priority": item.priority,
            "expires": _duration(item.expires),
            "owner": item.owner_id,
            "declared": item.declared,
            "last_fired_at": _iso(item.last_fired_at),
            "next_run_at": _iso(item.next_run_at),
            "created_at": _iso(item.created_at),
            "paused_reason": item.paused_reason,
            "next_runs": [],
            "error": None,
        }
        try:
            row["next_runs"] = [_iso(t) for t in upcoming(item, now, runs)]
        except InvalidSchedule as exc:
            row["error"] = exc.message
        rows.append(row)
    return rows


def _duration(value: timedelta | None) -> str | None:
    return None if value is None else format_duration(value)


# --- acting ----------------------------------------------------------------------------------


def enqueue(
    kind: str,
    payload: Any = None,
    *,
    queue: str | None = None,
    priority: int | None = None,
    delay: str | None = None,
) -> Job:
    """Enqueue one job as an operator would, in its own transaction (the outbox commits it)."""
    handle = lookup(kind)
    with transaction.atomic(using=jobs_settings.DATABASE):
        return handle.enqueue(payload, queue=queue, priority=priority, delay=delay)


def wake() -> dict[str, int]:
    """Re-ask every waiting job now: ``{"woken": N}``, what ``jobs wake --json`` prints."""
    return {"woken": wake_waiting()}


def prune(
    older_than: str | None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Callable[[int, int], None] | None = None,
) -> PruneResult:
    """Delete ended jobs older than ``older_than`` (default: ``JOBS["RETENTION"]``)."""
    period = parse_duration(_older_than(older_than), name="--older-than")
    if batch_size < 1:
        raise BadInput(f"--batch-size must be at least 1, not {batch_size}.")
    return prune_jobs(period, batch_size=batch_size, progress=progress)


def prune_dry_run(older_than: str | None) -> PruneResult:
    """What ``prune`` would delete now, counted; nothing is deleted."""
    period = parse_duration(_older_than(older_than), name="--older-than")
    cutoff = clock.now() - period
    jobs = Job.objects.using(jobs_settings.DATABASE).filter(expired(cutoff))
    steps = JobStep.objects.using(jobs_settings.DATABASE).filter(job__in=jobs)
    return PruneResult(cutoff=cutoff, jobs=jobs.count(), steps=steps.count())


def _older_than(value: str | None) -> str:
    if value is not None:
        return value
    if jobs_settings.RETENTION is None:
        raise BadInput(
            'Say how old: --older-than 30d (or set JOBS["RETENTION"] = "30d" in settings).'
        )
    return jobs_settings.RETENTION


# --- small helpers ---------------------------------------------------------------------------


def _states() -> str:
    return ", ".join(JobState.values)


def _short(value: Any) -> str:
    text = repr(value)
    return printable(text if len(text) <= 30 else text[:27] + "...")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
