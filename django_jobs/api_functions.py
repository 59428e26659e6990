"""Module-level doors: ``enqueue`` by kind name and ``emit`` of events."""

from __future__ import annotations

from typing import Any

from .models import Job
from .registry import lookup


def enqueue(kind: str, payload: Any = None, **options: Any) -> Job:
    """Enqueue a job by kind name; same options as ``JobHandle.enqueue``."""
    return lookup(kind).enqueue(payload, **options)


def emit(name: str, data: Any, *, owner: Any = None, tenant: str | None = None) -> list[Job]:
    """Admit one job per ``@job(on=name)`` handler and wake matching waits, in the caller's
    transaction. Returns the admitted jobs."""
    from .engine.emit import emit as emit_event

    return emit_event(name, data, owner=owner, tenant=tenant)
