"""kill -9 in the middle of a drain of three-step jobs, django_jobs and DBOS: how many step
bodies ran again after their result was stored.

    python -m bench.steps_kill             # 2,000 jobs each; or: python -m bench --only stepskill
    python -m bench.steps_kill --jobs 500

For each engine: ``--jobs`` jobs of three durable steps (django_jobs: ``bench.counted_steps``,
``ctx.step.run``; DBOS: a ``@DBOS.workflow()`` of three ``@DBOS.step()`` functions on a
queue, ``bench/peerside/dbos_loops.py kill-drain``) are drained at concurrency 4 by one
process. Each step body creates a file (``JOB.STEP.UNIQUE``) in a folder of its own before it
returns, so every execution of a body is on disk whatever happens to the process. Once half
of the bodies have run, the process gets SIGKILL. Then, with the process gone, the engine's
stored step results are read (django_jobs: the ``completed`` rows of ``django_jobs_jobstep``;
DBOS: the rows of ``dbos.operation_outputs``), the drain is started again and runs to the end.
Counted:

- ``re-run after stored``: bodies that ran after the kill for a step whose result was stored
  before it: a durable step must never do that (django_jobs' goal: 0);
- ``re-run in all``: bodies that ran more than once, those above plus the ones in flight at
  the kill (a body that ran and whose result was not stored yet runs again: at-least-once).

django_jobs' worker runs with a 2 s lease (``JOBS_LEASE``), so that its restart finds the
killed worker's jobs expired at once instead of after the default 30 s; DBOS's restart takes
the same executor id, and DBOS recovers the workflows that executor left pending at launch.
Every job must end succeeded with each step's body run at least once.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import peers, peers_env
from bench.harness import (
    DEFAULT_URL,
    Worker,
    check_all_succeeded,
    prepare_database,
    reset,
    sql,
)

CONCURRENCY = 4
LEASE = "2s"


def bodies(folder: Path) -> list[tuple[str, str]]:
    """(job, step) of every body execution recorded in ``folder``."""
    found = []
    for name in os.listdir(folder):
        job, step, _ = name.rsplit(".", 2)
        found.append((job, step))
    return found


def count_runs(
    before: list[tuple[str, str]],
    after: list[tuple[str, str]],
    stored: set[tuple[str, str]],
    expected: set[tuple[str, str]],
) -> dict[str, int]:
    """The counts of one check. ``before``: the body executions recorded when the process was
    killed; ``after``: every execution at the end; ``stored``: the steps whose result was
    stored at the kill; ``expected``: every (job, step) that must have run.

    Raises if a step never ran."""
    missing = expected - set(after)
    if missing:
        raise SystemExit(f"{len(missing)} step(s) never ran, e.g. {sorted(missing)[:3]}.")
    since = Counter(after) - Counter(before)  # what ran after the kill
    return {
        "re-run after stored": sum(times for step, times in since.items() if step in stored),
        "re-run in all": len(after) - len(expected),
        "ran before the kill": len(before),
    }


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"Timed out waiting for {what}.")
        time.sleep(0.01)


def figures(engine: str, counts: dict[str, int]) -> dict[str, float]:
    return {f"stepskill: {engine} {what} (n)": float(n) for what, n in counts.items()}


# -- django_jobs --------------------------------------------------------------------------------


def django_jobs_check(n: int, folder: Path) -> dict[str, int]:
    from bench.jobs import COUNTED_STEPS, STEP_RUNS, counted_steps

    reset()
    payloads = [{"n": i} for i in range(n)]
    for start in range(0, n, 1000):
        counted_steps.enqueue_many(payloads[start : start + 1000])
    env = {STEP_RUNS: str(folder), "JOBS_LEASE": LEASE}
    first = Worker("--burst", "--concurrency", str(CONCURRENCY), env=env)
    wait_for(lambda: len(os.listdir(folder)) >= 3 * n // 2, 600, "half of the step bodies")
    first.popen.send_signal(signal.SIGKILL)
    first.popen.wait(30)
    before = bodies(folder)
    stored = {
        (str(job), name)
        for job, name in sql(
            "SELECT job_id, name FROM django_jobs_jobstep WHERE state = 'completed'"
        )
    }
    # The killed worker's jobs are leased until their lease ends: start again after it.
    (until,) = sql("SELECT MAX(leased_until) FROM django_jobs_job WHERE state = 'running'")[0]
    if until is not None:
        time.sleep(max((until - datetime.now(UTC)).total_seconds() + 0.2, 0))
    for _ in range(3):  # a burst worker leaves when nothing is due; the rest, if any, next
        again = Worker("--burst", "--concurrency", str(CONCURRENCY), env=env)
        again.wait_ready()
        again.wait()
        (left,) = sql("SELECT COUNT(*) FROM django_jobs_job WHERE state <> 'succeeded'")[0]
        if not left:
            break
        time.sleep(2.5)
    check_all_succeeded(n, kind=counted_steps.kind)
    ids = [str(row[0]) for row in sql("SELECT id FROM django_jobs_job")]
    expected = {(job, step) for job in ids for step in COUNTED_STEPS}
    counts = count_runs(before, bodies(folder), stored, expected)
    reset()
    return counts


# -- DBOS ---------------------------------------------------------------------------------------


def dbos_check(python: Path, url: str, n: int, folder: Path) -> dict[str, int]:
    script = peers.SCRIPTS / "dbos_loops.py"
    common = [str(python), str(script), "kill-drain", "--url", url, "--jobs", str(n)]
    common += ["--runs-dir", str(folder)]
    first = subprocess.Popen([*common, "--enqueue"], cwd=peers.SCRIPTS)
    try:
        wait_for(
            lambda: len(os.listdir(folder)) >= 3 * n // 2 or first.poll() is not None,
            900,
            "half of DBOS's step bodies",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    if first.returncode != -signal.SIGKILL:
        raise SystemExit(f"The DBOS drain exited {first.returncode} before it was killed.")
    before = bodies(folder)
    with peers.connect(url) as conn:
        stored = {
            (workflow, name)
            for workflow, name in conn.execute(
                "SELECT workflow_uuid, function_name FROM dbos.operation_outputs"
            )
        }
        workflows = [
            row[0] for row in conn.execute("SELECT workflow_uuid FROM dbos.workflow_status")
        ]
    subprocess.run(common, cwd=peers.SCRIPTS, check=True, timeout=900)
    expected = {(workflow, step) for workflow in workflows for step in ("one", "two", "three")}
    return count_runs(before, bodies(folder), stored, expected)


def measure(bench_url: str, n: int) -> dict[str, float]:
    """Both checks, one after the other: the figures ``python -m bench`` reports."""
    python = peers_env.ensure()
    dbos_url = peers.peers_url(bench_url, "_dbos")
    peers.create_database(dbos_url)
    found: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="steps-kill-") as where:
        mine, theirs = Path(where, "django_jobs"), Path(where, "dbos")
        mine.mkdir()
        theirs.mkdir()
        found.update(figures("django_jobs", django_jobs_check(n, mine)))
        found.update(figures("dbos", dbos_check(python, dbos_url, n, theirs)))
    for name, value in found.items():
        print(f"  {name:<48}{value:>8,.0f}", flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steps_kill", description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--jobs", type=int, default=2_000)
    args = parser.parse_args(argv)
    prepare_database(args.database_url)
    measure(args.database_url, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
