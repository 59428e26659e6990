"""A job as JSON: one shape shared by the API, the CLI, the admin and the events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .models import Job, JobStep


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


TRACEBACK_MARKER = "\n\nTraceback (most recent call last):"


def public_error(error: str | None) -> str | None:
    """The error without its traceback: what a job's owner sees (operators see it all)."""
    if error is None:
        return None
    return error.split(TRACEBACK_MARKER, 1)[0]


def job_json(
    job: Job, *, payload: bool = True, deduped: bool | None = None, traceback: bool = True
) -> dict[str, Any]:
    """The job JSON of the API. ``traceback=False`` drops server tracebacks from ``error``."""
    progress = job.progress or {}
    data: dict[str, Any] = {
        "id": job.pk,
        "kind": job.kind,
        "queue": job.queue,
        "engine": job.engine,
        "state": job.state,
        "owner": job.owner_id,
        "tenant": job.tenant,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "progress": {"stage": progress.get("stage"), "percent": progress.get("percent")},
        "error": (job.error if traceback else public_error(job.error))
        if job.state in ("failed", "blocked", "unknown")
        else None,
        "wait_reason": job.wait_reason if job.state == "waiting" else None,
        "run_at": _iso(job.run_at),
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "ended_at": _iso(job.ended_at),
        "timestamps_derived": job.timestamps_derived,
        "idempotency_key": job.idempotency_key,
    }
    if payload:
        data["payload"] = job.payload
        data["result"] = job.result
    if deduped is not None:
        data["deduped"] = deduped
    return data


def step_json(step: JobStep) -> dict[str, Any]:
    return {
        "name": step.name,
        "state": step.state,
        "attempts": step.attempts,
        "started_at": _iso(step.started_at),
        "ended_at": _iso(step.ended_at),
        "error": step.error,
    }


def job_detail_json(job: Job, *, traceback: bool = True) -> dict[str, Any]:
    data = job_json(job, traceback=traceback)
    data["steps"] = [step_json(s) for s in job.steps.all()]
    data["log"] = list(job.log or [])
    return data
