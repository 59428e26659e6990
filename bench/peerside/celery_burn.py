"""Celery's prefork pool on ``bench.processes``' CPU-bound job: the same loop, the same count.

``python celery_burn.py drain --jobs N --loops L [--concurrency 2]``

This module is also the Celery app its worker runs (``celery -A celery_burn worker``): one
task, ``burn``, the loop of ``bench.burn`` (``bench/jobs.py``) with the loop count
``bench.processes`` calibrated, so a task is about 20 ms of pure Python as a django_jobs job
is. The broker is Redis, in a database of the benchmark's own (db 15, or the URL in
``BENCH_CELERY_BROKER``), emptied before and after each drain. There is no result backend:
each task ends by pushing ``"N END"`` (its number and its clock reading) onto a Redis list,
one round trip, and the drain checks that the list holds every number exactly once.

The worker runs with Celery's defaults, as a team that installs it runs it: ``--pool prefork
--concurrency 2`` and nothing else, so the prefetch multiplier is 4, tasks are acknowledged
early and the pool's scheduling is ``fair`` (Celery 5's default ``-O``).

The drain mirrors django_jobs': there the worker is started and ready before its jobs fall
due, and the rate is ``jobs / (last end - the due moment)``. A Celery task has no due moment
of its own without an ETA (and ETA tasks take another path: the worker prefetches them all
and holds them on its timer), so the backlog is enqueued first with ``burn.delay()``, then the
worker starts; the moment it is ready (its ``worker_ready`` signal, sent as it begins to
consume and before its loop takes a message) is the due moment: rate = ``jobs / (last end -
ready)``. Prints ``{"celery: prefork c=N cpu-bound drain": rate}`` as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready

# A plain Celery app: with a Django settings module named (the benchmark's, inherited), Celery's
# Django fix-up would set Django up in every worker process.
os.environ.pop("DJANGO_SETTINGS_MODULE", None)
BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/15")
ENDS = "bench:celery_burn:ends"
READY = "bench:celery_burn:ready"

app = Celery("celery_burn", broker=BROKER)

_client: redis.Redis | None = None


def client() -> redis.Redis:
    """This process's Redis client: made on first use, so each pool child makes its own."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(BROKER)
    return _client


@app.task
def burn(n: int, loops: int) -> int:
    """``bench.burn``'s loop, then its end time recorded."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    client().rpush(ENDS, f"{n} {time.time()}")
    return total


@worker_ready.connect
def _ready(**_: Any) -> None:
    client().set(READY, time.time())


def drain(jobs: int, loops: int, concurrency: int) -> float:
    store = client()
    store.flushdb()
    for n in range(jobs):
        burn.delay(n, loops)
    log = tempfile.TemporaryFile("w+")
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "celery_burn", "worker"),
            *("--pool", "prefork", "--concurrency", str(concurrency)),
        ],
        cwd=Path(__file__).resolve().parent,
        env={**os.environ, "BENCH_CELERY_BROKER": BROKER},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # Ten times what two cores take at 20 ms a task, and a minute for the start.
        deadline = time.monotonic() + 60 + jobs * 0.1
        while store.llen(ENDS) < jobs:
            if time.monotonic() > deadline or worker.poll() is not None:
                log.seek(0)
                raise SystemExit(f"The Celery drain did not finish:\n{log.read()}")
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)  # a warm shutdown: the queue is empty by now
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    ready = float(store.get(READY) or 0)
    ends = [line.decode().split() for line in store.lrange(ENDS, 0, -1)]
    store.flushdb()
    numbers = sorted(int(n) for n, _ in ends)
    if not ready or numbers != list(range(jobs)):
        raise SystemExit(
            f"Celery ran {len(numbers)} tasks for {jobs} ({len(set(numbers))} distinct)"
        )
    return jobs / (max(float(end) for _, end in ends) - ready)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=("drain",))
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--loops", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    rate = drain(args.jobs, args.loops, args.concurrency)
    print(json.dumps({f"celery: prefork c={args.concurrency} cpu-bound drain": rate}), flush=True)


if __name__ == "__main__":
    main()
