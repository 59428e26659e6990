"""A fleet of real ``runjobs`` processes under faults: nothing lost, nothing done twice.

Each job is three durable steps, the middle one an atomic step that counts its effect in a
table (docs/reliability.md, "The fleet under faults"). The short versions run in the normal
suite; the long ones are marked ``soak`` (``pytest -m soak``). PostgreSQL only: several
workers claim side by side, and the server is what goes away.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import statistics
import time
from pathlib import Path

import pytest

from django_jobs.models import Job
from testproject.jobs import exits_process, hangs, hogs, raises_in_except
from tests.conftest import end_other_sessions, wait_until

from .fleet import (
    LEASE,
    assert_exactly_once,
    enqueue_three_steps,
    require_postgres,
    states,
    succeeded,
    within,
)

pytestmark = [pytest.mark.faults, pytest.mark.process, pytest.mark.postgres, pytest.mark.engine]

SEED = 20261201  # the kills' schedule and victims: a failing run can be replayed


@pytest.mark.parametrize(
    ("jobs", "deadline"),
    [pytest.param(500, 150, id="500"), pytest.param(5000, 1200, id="5000", marks=pytest.mark.soak)],
)
def test_kill_9_of_random_workers_loses_and_repeats_nothing(spawn, jobs: int, deadline: float):
    require_postgres()
    rng = random.Random(SEED)
    ids = enqueue_three_steps(jobs, pause=0.1)

    def worker():
        return spawn("runjobs", "--concurrency", "2", env={"JOBS_LEASE": LEASE})

    workers = [worker() for _ in range(4)]
    began = time.monotonic()
    kills = 0
    # Kill one random worker every 1-3 s, and start a new one in its place, until the drain
    # ends. The wait between kills is the fault's schedule; the drain itself is polled.
    while not within(lambda: succeeded(ids) == jobs, rng.uniform(1.0, 3.0)):
        assert time.monotonic() - began < deadline, (
            f"not drained after {deadline}s and {kills} kills: {states(ids)}"
        )
        victim = rng.randrange(len(workers))
        # The whole worker at once, its supervisor and its processes: a machine that dies.
        os.killpg(workers[victim].popen.pid, signal.SIGKILL)
        workers[victim].popen.wait(timeout=10)
        workers[victim] = worker()
        kills += 1
    elapsed = time.monotonic() - began

    figures = assert_exactly_once(ids)
    assert kills >= 2, "the drain ended before the faults began: nothing was shown"
    assert figures["retried_attempts"] > 0, "no kill interrupted a job"
    print(f"\nkill -9 loop: {figures} kills={kills} seconds={elapsed:.1f}")


def _children(parent: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()]
    except OSError:
        return []


def child_pids(parent: int) -> list[int]:
    """The worker processes of a ``runjobs`` supervisor (Linux): the children of its template
    (a child with ``--child-template-fd``), and any it started as new interpreters."""
    found = []
    for pid in _children(parent):
        try:
            template = b"--child-template-fd" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        found += _children(pid) if template else [pid]
    return found


@pytest.mark.parametrize(
    ("jobs", "deadline"),
    [pytest.param(500, 150, id="500"), pytest.param(5000, 1200, id="5000", marks=pytest.mark.soak)],
)
def test_kill_9_of_random_worker_processes_loses_and_repeats_nothing(
    spawn, jobs: int, deadline: float
):
    # runjobs --processes 2: the supervisors stay; their processes are killed at random. Each
    # killed process's jobs end WORKER_LOST within 2 s (timed from the kill to the row).
    require_postgres()
    rng = random.Random(SEED)
    ids = enqueue_three_steps(jobs, pause=0.1)
    workers = [
        spawn("runjobs", "--processes", "2", "--concurrency", "2", env={"JOBS_LEASE": LEASE})
        for _ in range(2)
    ]
    began = time.monotonic()
    kills, recoveries = 0, []
    while not within(lambda: succeeded(ids) == jobs, rng.uniform(0.5, 1.5)):
        assert time.monotonic() - began < deadline, (
            f"not drained after {deadline}s and {kills} kills: {states(ids)}"
        )
        children = child_pids(rng.choice(workers).popen.pid)
        if not children:
            continue  # its processes are starting
        victim = rng.choice(children)
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        kills += 1
        lost = Job.objects.filter(
            pk__in=ids, error__startswith=f"WORKER_LOST: worker process {victim} died (signal 9)"
        )
        if within(lost.exists, 3.0):  # not when the process was between jobs
            recoveries.append(time.monotonic() - killed)
    elapsed = time.monotonic() - began

    figures = assert_exactly_once(ids)
    assert kills >= 2, "the drain ended before the faults began: nothing was shown"
    assert recoveries, "no kill interrupted a job"
    assert max(recoveries) < 2.0, recoveries
    for proc in workers:
        assert proc.popen.poll() is None, f"a supervisor exited:\n{proc.output()}"
    print(
        f"\nkill -9 of worker processes: {figures} kills={kills} seconds={elapsed:.1f} "
        f"recovery p50={statistics.median(recoveries) * 1000:.0f}ms "
        f"max={max(recoveries) * 1000:.0f}ms (n={len(recoveries)})"
    )


@pytest.mark.parametrize(
    ("jobs", "cuts"),
    [
        pytest.param(300, 4, id="300x4"),
        pytest.param(3000, 10, id="3000x10", marks=pytest.mark.soak),
    ],
)
def test_the_database_going_away_repeatedly_mid_drain(spawn, jobs: int, cuts: int):
    require_postgres()
    ids = enqueue_three_steps(jobs, pause=0.02)
    workers = [spawn("runjobs", "--concurrency", "4", env={"JOBS_LEASE": LEASE}) for _ in range(2)]
    began = time.monotonic()
    terminated = 0
    # Cut every worker connection at evenly spread points of the drain (by progress, not by
    # time): claims, heartbeats, steps and outcomes are all in flight when it happens.
    for cut in range(1, cuts + 1):
        mark = jobs * cut // (cuts + 1)
        wait_until(
            lambda mark=mark: succeeded(ids) >= mark,
            timeout=120,
            message=f"stuck before {mark} jobs: {states(ids)}\n" + workers[0].output(),
        )
        ended = end_other_sessions()
        assert ended >= 2, "the workers had no connection to end"
        terminated += ended
    wait_until(
        lambda: succeeded(ids) == jobs,
        timeout=180,
        message=f"not drained: {states(ids)}\n" + "\n".join(w.output() for w in workers),
    )
    elapsed = time.monotonic() - began

    figures = assert_exactly_once(ids)
    for proc in workers:
        assert proc.popen.poll() is None, f"a worker exited:\n{proc.output()}"
        # Each one saw the outage, said so, and kept retrying.
        assert "Database unavailable" in proc.output(), proc.output()
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=30) == 0, proc.output()
    print(
        f"\ndatabase outages: {figures} cuts={cuts} backends_ended={terminated} "
        f"seconds={elapsed:.1f}"
    )


HEADROOM = 256 * 1024 * 1024  # what a memory-hungry runner may take before MemoryError


def _virtual_size(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/<pid>/status")


def test_misbehaving_runners_in_a_busy_fleet_leave_the_other_jobs_exactly_once(
    spawn, tmp_path: Path
):
    # The runner faults of test_runner_faults.py, all at once, in the middle of a drain by
    # three workers: the good jobs around them are neither lost nor repeated.
    require_postgres()
    ids = enqueue_three_steps(300, pause=0.02)
    env = {"JOBS_LEASE": LEASE, "MALLOC_ARENA_MAX": "2"}
    workers = [spawn("runjobs", "--concurrency", "2", env=env) for _ in range(3)]
    for proc in workers:
        # A memory limit, as a container's would be, so that allocating fails in the runner:
        # on the worker processes, which run the jobs, not on their supervisor.
        proc.wait_for_output("Worker process 0 ready")
        children = child_pids(proc.popen.pid)
        assert children, proc.output()
        for pid in children:
            size = _virtual_size(pid) + HEADROOM
            resource.prlimit(pid, resource.RLIMIT_AS, (size, size))
    wait_until(lambda: succeeded(ids) >= 100, timeout=60, message=workers[0].output())

    release = tmp_path / "release"
    bad = {
        "hang": hangs.enqueue({"until": str(release)}, priority=-1),
        "hog": hogs.enqueue({"max_mb": 1024}, priority=-1),
        "except": raises_in_except.enqueue({"n": "fleet"}, priority=-1),
    }
    ended = ("failed", "succeeded")
    wait_until(
        lambda: set(states([job.pk for job in bad.values()])) <= set(ended),
        timeout=60,
        message="\n".join(w.output() for w in workers),
    )
    # Then one that ends its process (after the others, so that it takes none of them along).
    bad["exit"] = exits_process.enqueue({"code": 7}, priority=-1)
    bad_ids = [job.pk for job in bad.values()]
    wait_until(
        lambda: succeeded(ids) == len(ids) and set(states(bad_ids)) <= set(ended),
        timeout=120,
        message=f"{states(ids)} {states(bad_ids)}\n" + "\n".join(w.output() for w in workers),
    )
    release.touch()  # the abandoned runner may end now; what it returns is dropped

    assert_exactly_once(ids)
    errors = {name: Job.objects.get(pk=job.pk) for name, job in bad.items()}
    assert {job.state for job in errors.values()} == {"failed"}
    # Stopped at its hard limit (its soft one plus KILL_GRACE), which it swallowed too.
    assert errors["hang"].error.startswith("JOB_TIMEOUT: stopped at its time limit of 11s")
    # Its worker process died under it: its supervisor ended the attempt at once.
    assert "WORKER_LOST: worker process" in errors["exit"].error
    assert "died (exit code 7)" in errors["exit"].error
    assert "MemoryError" in errors["hog"].error
    assert "raised while handling the first error" in errors["except"].error
    # The runner that ended its process took one worker process with it; its supervisor
    # started another, and every worker went on.
    for proc in workers:
        assert proc.popen.poll() is None, proc.output()
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=30) == 0, proc.output()
