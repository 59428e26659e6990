"""The benchmark's own kinds: no-ops, so the figures measure the queue and nothing else."""

from __future__ import annotations

import asyncio

from django_jobs import job

KIND = "bench.noop"


@job(KIND, idempotency_key="payload")
def noop(ctx: object) -> None:
    return None


@job("bench.async_noop", idempotency_key="payload")
async def async_noop(ctx: object) -> None:
    return None


#: How long each ``async_sleep`` job awaits: the jobs of a wave should overlap.
ASYNC_SLEEP = 0.2


@job("bench.async_sleep", idempotency_key="payload")
async def async_sleep(ctx: object) -> None:
    await asyncio.sleep(ASYNC_SLEEP)


@job("bench.fan_out", idempotency_key="payload")
def fan_out(ctx: object) -> int:
    """Spawns ``children`` no-op children and gathers them (``python -m bench.fanout``)."""
    count = ctx.payload["children"]  # type: ignore[attr-defined]
    ids = ctx.step.spawn("children", noop, [{"child": n} for n in range(count)])  # type: ignore[attr-defined]
    return len(ctx.step.gather("gathered", ids))  # type: ignore[attr-defined]


@job("bench.chord_total", idempotency_key="payload")
def chord_total(ctx: object) -> int:
    """A chord's callback: how many results the group handed over (``bench.fanout``)."""
    return len(ctx.previous)  # type: ignore[attr-defined]


@job("bench.three_steps", idempotency_key="payload")
def three_steps(ctx: object) -> None:
    """Three durable steps that do nothing: the cost of recording steps, beside a no-op."""
    for name in ("one", "two", "three"):
        ctx.step.run(name, lambda: None)  # type: ignore[attr-defined]
