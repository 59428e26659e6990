"""Module-level doors: ``enqueue`` by kind name and ``emit`` of events."""

from __future__ import annotations

from typing import Any

from .models import Job
from .registry import lookup


def enqueue(kind: str, payload: Any = None, **options: Any) -> Job:
    """Enqueue a job by kind name; same options as ``JobHandle.enqueue``."""
    return lookup(kind).enqueue(payload, **options)


def emit(name: str, data: Any, *, owner: Any = None, tenant: str | None = None) -> list[Job]:
    """Admit one job for every ``@job(on=name)`` handler, inside the caller's transaction."""
    from .registry import handles_on

    jobs = []
    for handle in handles_on(name):
        jobs.append(handle.enqueue(data, owner=owner, tenant=tenant))
    return jobs
