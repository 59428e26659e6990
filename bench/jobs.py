"""The benchmark's own kind: a no-op, so the figures measure the queue and nothing else."""

from __future__ import annotations

from django_jobs import job

KIND = "bench.noop"


@job(KIND, idempotency_key="payload")
def noop(ctx: object) -> None:
    return None
