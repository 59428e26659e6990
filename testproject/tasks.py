"""Sample ``@task`` functions of Django's Tasks framework, run by ``django_jobs.tasks``."""

from __future__ import annotations

import asyncio
import os
from typing import Any

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import TaskContext, task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def greet(name: str, punctuation: str = "!") -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"greeting": f"hello {name}{punctuation}", "pid": os.getpid()}


@task
def explode(message: str) -> None:
    raise LookupError(message)


@task
def exits(code: int) -> None:
    """Calls ``sys.exit``: Django's Tasks report it as a failure, like any exception."""
    raise SystemExit(code)


@task(takes_context=True)
def introspect(context: TaskContext, tag: str) -> dict[str, Any]:
    """Return what the task sees of itself through its context."""
    result = context.task_result
    return {
        "tag": tag,
        "id": result.id,
        "attempt": context.attempt,
        "status": str(result.status),
        "worker_ids": result.worker_ids,
        "backend": result.backend,
        "args": result.args,
        "kwargs": result.kwargs,
    }


@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int) -> int:
    """Fail every attempt before ``succeed_on``; return the attempt that succeeded."""
    if context.attempt < succeed_on:
        raise ConnectionError(f"attempt {context.attempt} failed on purpose")
    return context.attempt


@task
def not_json() -> object:
    return object()


@task
def lone_surrogate() -> str:
    return "lone \ud800"
