"""The benchmark's own kind: a no-op, so the figures measure the queue and nothing else."""

from __future__ import annotations

from django_jobs import job

KIND = "bench.noop"


@job(KIND, idempotency_key="payload")
def noop(ctx: object) -> None:
    return None


@job("bench.fan_out", idempotency_key="payload")
def fan_out(ctx: object) -> int:
    """Spawns ``children`` no-op children and gathers them (``python -m bench.fanout``)."""
    count = ctx.payload["children"]  # type: ignore[attr-defined]
    ids = ctx.step.spawn("children", noop, [{"child": n} for n in range(count)])  # type: ignore[attr-defined]
    return len(ctx.step.gather("gathered", ids))  # type: ignore[attr-defined]
