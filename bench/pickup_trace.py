"""Where a pickup's time goes, step by step: ``python -m bench.pickup_trace``.

The pickup figure (``python -m bench --only pickup``) gives one number per job: from the clock
reading just before ``enqueue`` to the runner's first line. This splits it. An idle worker
(``runjobs --processes 0 --concurrency 4``, not burst, live events as ``--live-events``
says) runs in its own process with a clock reading patched in at each step a job passes; this
process enqueues ``--jobs`` jobs ``--gap`` ms apart (``bench.pickup``, as the figure does)
and times its own insert statement. It prints each step's p50 in ms:

- ``enqueue, before its statement``: validation, keys, the ``job.created`` text;
- ``insert statement``: its round trip, the commit included (the NOTIFY goes out at commit);
- ``insert sent -> NOTIFY heard``: until the worker's listener thread has the notification;
- ``heard -> claim loop awake``: the hand-off from the listener thread;
- ``awake -> claim sent``: the claim loop's own work (limits, the statement's text);
- ``claim statement``: its round trip (planned on each execution), the commit included;
- ``jobs built``: the rows turned into ``Job`` objects;
- ``built -> executor thread``: the hand-off to an executor thread;
- ``executor -> runner``: ``job.started`` published, the attempt's set-up, the runner called.

The readings are patched into private code for the measurement: when a name they need has
moved, this stops at start-up and says which, rather than report nothing.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.engine_paths import engine_module
from bench.harness import (
    DEFAULT_URL,
    listening,
    paced_pickups,
    prepare_database,
    reset,
    sql,
    wait_for,
)

STEPS = (
    "enqueue, before its statement",
    "insert statement",
    "insert sent -> NOTIFY heard",
    "heard -> claim loop awake",
    "awake -> claim sent",
    "claim statement",
    "jobs built",
    "built -> executor thread",
    "executor -> runner",
    "total (the pickup figure)",
)


#: What the trace patches, as "module:Owner.name": the test suite checks that each is there.
#: Each module by its path today; an engine from before its move is patched at the path it had
#: then (``bench.engine_paths``). ``EXECUTE`` is the method each job is handed to, on its
#: executor thread.
LISTENER = "django_jobs.store.postgres.listen:_Listener.wait_notifications"
WORKER_INIT = "django_jobs.engine.worker.worker:Worker.__init__"
CLAIM_CURSOR = "django_jobs.store.postgres.cursors:_PlanningCursor.execute"
JOBS_FROM = "django_jobs.store.base:Store.jobs_from"
EXECUTE = "django_jobs.engine.worker.worker:Worker._execute"
INSERT = "django_jobs.store.postgres:PostgresStore._insert_rows"
PATCHED = (LISTENER, WORKER_INIT, CLAIM_CURSOR, JOBS_FROM, EXECUTE, INSERT)


def resolve(target: str) -> tuple[Any, str]:
    """The owner of ``target`` ("module:Owner.name") and the name; stop if it is gone."""
    module, _, path = target.partition(":")
    *owners, name = path.split(".")
    try:
        owner: Any = engine_module(module)
        for part in owners:
            owner = getattr(owner, part)
        getattr(owner, name)
    except (ImportError, AttributeError):
        raise SystemExit(
            f"bench.pickup_trace: {target} is gone; follow the step it timed to its new "
            "place and patch that."
        ) from None
    return owner, name


def _patch(target: str, wrap: Callable[[Any], Any]) -> None:
    """Replace ``target`` with ``wrap(the original)``."""
    owner, name = resolve(target)
    setattr(owner, name, wrap(getattr(owner, name)))


def worker_main(out: str) -> None:
    """The traced worker: stamps kept in memory, written to ``out`` as it stops."""
    import django

    django.setup()
    from django.core.management import call_command

    stamps: dict[str, Any] = {"heard": [], "awake": [], "claims": [], "handed": {}}

    def heard(original: Any) -> Any:
        def wait_notifications(self: Any, timeout: float) -> Any:
            found = original(self, timeout)
            if found:
                stamps["heard"].append(time.time())
            return found

        return wait_notifications

    class Wake(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            woken = super().wait(timeout)
            stamps["awake"].append(time.time())
            return woken

    def init(original: Any) -> Any:
        def stamped_init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            self.wake = Wake()

        return stamped_init

    statement: list[float] = []

    def executed(original: Any) -> Any:
        def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
            statement[:] = [time.time()]
            result = original(self, *args, **kwargs)
            statement.append(time.time())
            return result

        return execute

    def built(original: Any) -> Any:
        def jobs_from(self: Any, sql_text: str, params: Any, *, planned: bool = False) -> Any:
            jobs = original(self, sql_text, params, planned=planned)
            if planned and jobs:
                sent, back = statement
                stamps["claims"].append((sent, back, time.time(), [job.pk for job in jobs]))
            return jobs

        return jobs_from

    def handed(original: Any) -> Any:
        def _execute(self: Any, job: Any, slot: int) -> Any:
            stamps["handed"][job.pk] = time.time()
            return original(self, job, slot)

        return _execute

    _patch(LISTENER, heard)
    _patch(WORKER_INIT, init)
    _patch(CLAIM_CURSOR, executed)
    _patch(JOBS_FROM, built)
    _patch(EXECUTE, handed)
    try:
        # --processes 0: the jobs run in this process, where the readings are patched in. A
        # worker process under the default supervisor is a fresh ``runjobs --processes 0`` of
        # its own, which none of them would reach; the steps a job passes are the same.
        call_command("runjobs", "--processes", "0", "--concurrency", "4", "--no-scheduler")
    finally:
        with open(out, "w") as file:
            json.dump(stamps, file)


def trace(jobs: int, gap: float) -> dict[str, float]:
    """Run the traced worker and ``jobs`` paced jobs; each step's p50 in ms."""
    inserts: list[tuple[float, float]] = []

    def timed(original: Any) -> Any:
        def _insert_rows(self: Any, rows: Any, created: Any) -> Any:
            sent = time.time()
            inserted = original(self, rows, created)
            inserts.append((sent, time.time()))
            return inserted

        return _insert_rows

    _patch(INSERT, timed)
    reset()
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "stamps.json")
        worker = subprocess.Popen([sys.executable, "-m", "bench.pickup_trace", "--worker", out])
        try:
            wait_for(listening, 60, "the traced worker's LISTEN connection")
            sent: dict[int, tuple[float, float, float]] = {}

            def note(job: Any, at: float) -> None:
                sent[job.pk] = (at, *inserts[-1])

            first_id = paced_pickups(jobs, gap, "trace", note)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
        with open(out) as file:
            stamps = json.load(file)
    results = dict(sql("SELECT id, result FROM django_jobs_job WHERE id > %s", [first_id]))
    return _steps(stamps, sent, {pk: float(ms) for pk, ms in results.items()})


def _steps(
    stamps: dict[str, Any], sent: dict[int, tuple[float, float, float]], latency: dict[int, float]
) -> dict[str, float]:
    heard, awake = sorted(stamps["heard"]), sorted(stamps["awake"])
    claim_of = {pk: claim[:3] for claim in stamps["claims"] for pk in claim[3]}
    spans: dict[str, list[float]] = {step: [] for step in STEPS}
    for pk, (at, insert_sent, insert_back) in sent.items():
        claim_sent, claim_back, jobs_built = claim_of[pk]
        # The notification this claim answered: the last one heard before the claim began.
        told = heard[bisect.bisect_right(heard, claim_sent) - 1]
        woke = awake[bisect.bisect_left(awake, told)]
        runner = at + latency[pk] / 1000
        for step, span in zip(
            STEPS,
            (
                insert_sent - at,
                insert_back - insert_sent,
                told - insert_sent,
                woke - told,
                claim_sent - woke,
                claim_back - claim_sent,
                jobs_built - claim_back,
                stamps["handed"][str(pk)] - jobs_built,
                runner - stamps["handed"][str(pk)],
                runner - at,
            ),
            strict=True,
        ):
            spans[step].append(span * 1000)
    return {step: statistics.median(values) for step, values in spans.items()}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pickup_trace", description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--gap", type=float, default=20, help="ms between paced jobs")
    parser.add_argument("--live-events", choices=("on", "off"), default="on")
    parser.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker)
        return 0
    # Read by bench.apps here and in the worker.
    os.environ["BENCH_LIVE_EVENTS"] = "1" if args.live_events == "on" else "0"
    prepare_database(args.database_url)
    steps = trace(args.jobs, args.gap / 1000)
    for step, ms in steps.items():
        print(f"{step:32} {ms:7.3f} ms")
    print(
        f"p50 of each step over {args.jobs} jobs {args.gap:g} ms apart, live events "
        f"{args.live_events}; load average (1 min) {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
