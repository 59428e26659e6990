"""The benchmark's own kinds: no-ops, so the figures measure the queue and nothing else."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable

from django_jobs import Retry, job

KIND = "bench.noop"


@job(KIND, idempotency_key="payload")
def noop(ctx: object) -> None:
    return None


PICKUP_KIND = "bench.pickup"


@job(PICKUP_KIND, idempotency_key="payload")
def pickup(ctx: object) -> float:
    """The pickup's job: milliseconds from the payload's ``at`` (the producer's clock reading
    just before ``enqueue``) to its runner's first line; a no-op otherwise."""
    return (time.time() - ctx.payload["at"]) * 1000  # type: ignore[attr-defined]


#: The same two with a soft time limit (and so a hard one, ``timeout`` + ``KILL_GRACE``) that
#: no job reaches: the cost of arming and disarming the limits of every job (``bench.run``'s
#: ``limits`` figures).
LIMITED_TIMEOUT = "1h"


@job("bench.noop_limited", idempotency_key="payload", timeout=LIMITED_TIMEOUT)
def noop_limited(ctx: object) -> None:
    return None


@job("bench.pickup_limited", idempotency_key="payload", timeout=LIMITED_TIMEOUT)
def pickup_limited(ctx: object) -> float:
    """``pickup`` with a time limit."""
    return (time.time() - ctx.payload["at"]) * 1000  # type: ignore[attr-defined]


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


#: The steps of ``counted_steps``, and the variable naming the folder they mark.
COUNTED_STEPS = ("one", "two", "three")
STEP_RUNS = "BENCH_STEP_RUNS"


def _mark(where: str, job_id: int, name: str) -> Callable[[], None]:
    def mark() -> None:
        path = os.path.join(where, f"{job_id}.{name}.{uuid.uuid4().hex}")
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))

    return mark


@job("bench.counted_steps", idempotency_key="payload")
def counted_steps(ctx: object) -> None:
    """``three_steps`` whose step bodies each leave a file (``JOB.STEP.UNIQUE``) in the folder
    ``BENCH_STEP_RUNS`` names before they return: every execution of a body, counted
    durably (``python -m bench.steps_kill``)."""
    where = os.environ[STEP_RUNS]
    for name in COUNTED_STEPS:
        ctx.step.run(name, _mark(where, ctx.job.pk, name))  # type: ignore[attr-defined]


@job("bench.burn", idempotency_key="payload")
def burn(ctx: object) -> int:
    """About 20 ms of pure Python (``bench.processes``): CPU-bound, the GIL held throughout."""
    total = 0
    for i in range(ctx.payload["loops"]):  # type: ignore[attr-defined]
        total += i * i % 7
    return total


@job("bench.hold", idempotency_key="payload")
def hold(ctx: object) -> None:
    """Writes its pid to the payload's ``pidfile``, then runs until its process is killed, or
    60 s pass (``bench.processes``: kill-to-requeue)."""
    with open(ctx.payload["pidfile"], "w") as out:  # type: ignore[attr-defined]
        out.write(str(os.getpid()))
    time.sleep(60)


@job("bench.hold_first", idempotency_key="payload", retry=Retry(attempts=3))
def hold_first(ctx: object) -> None:
    """Appends its pid to the payload's ``pidfile``; its first attempt then runs until its
    process is killed (or 60 s pass), a later one returns at once (``bench.processes``: kill -9
    to the job running again)."""
    with open(ctx.payload["pidfile"], "a") as out:  # type: ignore[attr-defined]
        out.write(f"{os.getpid()}\n")
    if ctx.attempt == 1:  # type: ignore[attr-defined]
        time.sleep(60)
