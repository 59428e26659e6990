"""Celery's API over the engine (``django_jobs.celery``) beside the native calls it makes: a
task's ``delay()`` against ``enqueue`` of a kind with the same meaning (every call a job of its
own), and the drain of the layer's jobs (their arguments decoded, the task's ``run`` called
with them) against native no-ops, each pair one right after the other.

The layer's task and its native twin are defined here, not in ``bench.jobs``: importing
``django_jobs.celery`` is a project's choice, and the other figures should not pay for it;
and an engine from before the layer (``--against``) has no ``idempotency_key="call"`` either.
"""

from __future__ import annotations

from typing import Any

from django_jobs import job
from django_jobs.celery import shared_task

from .harness import drain, drain_kind, reset, timed


@shared_task(name="bench.celery_noop")
def celery_noop(n: int, run: str) -> None:
    return None


@job("bench.noop_per_call", idempotency_key="call")
def noop_per_call(ctx: object) -> None:
    """A no-op whose every enqueue is a job of its own, as every Celery call is: the native
    side of the figures."""
    return None


#: The figures' names: the layer's beside the native one (bench/report.py compares them).
DELAY, ENQUEUE = "celery: delay()", "celery: native enqueue"
DRAIN, NATIVE_DRAIN = "celery: drain c=4", "celery: native drain c=4"


def enqueue_rates(n: int, tag: str, layer_first: bool) -> dict[str, float]:
    """``n`` calls of each, one per transaction (autocommit), each on an empty table."""

    def delays() -> int:
        for i in range(n):
            celery_noop.delay(i, tag)
        return n

    def enqueues() -> int:
        for i in range(n):
            noop_per_call.enqueue({"n": i, "run": tag})
        return n

    sides = [(DELAY, delays), (ENQUEUE, enqueues)]
    if not layer_first:
        sides.reverse()
    rates = {}
    for name, loop in sides:
        reset()
        rates[name], _ = timed(loop)
    return rates


def drain_rates(n: int, batch: int, tag: str, layer_first: bool) -> dict[str, float]:
    """``n`` jobs of each drained by a burst worker at concurrency 4."""

    def layer() -> float:
        reset()
        payloads: list[Any] = [{"args": [i, tag], "kwargs": {}} for i in range(n)]
        for start in range(0, n, batch):
            celery_noop.handle.enqueue_many(payloads[start : start + batch])
        rate, _ = drain(4, n, celery_noop.handle.kind)
        return rate

    def native() -> float:
        return drain_kind(noop_per_call, n, batch, tag, 4)

    sides = [(DRAIN, layer), (NATIVE_DRAIN, native)]
    if not layer_first:
        sides.reverse()
    return {name: measure() for name, measure in sides}
