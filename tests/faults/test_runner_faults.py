"""Runners that misbehave, against real ``manage.py runjobs`` processes (docs/reliability.md).

A runner that ignores its timeout, one that allocates without bound, one that ends the process,
one that raises while handling an exception (or raises something that cannot be printed): the
worker stays healthy or is replaced, the job ends with the reason, and the jobs behind it run.
The subprocesses read the real clock: the tests wait on them (``wait_until``), with a short
``LEASE`` where a crashed worker's jobs must come back.
"""

from __future__ import annotations

import resource
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from django_jobs.models import Job
from testproject.jobs import exits_process, hangs, hogs, raises_in_except, record
from testproject.models import Execution
from tests.conftest import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.process, pytest.mark.engine]

SHORT_LEASE = {"JOBS_LEASE": "2s"}
HEADROOM = 256 * 1024 * 1024  # what a memory-hungry runner may take before MemoryError


def exit_code(proc, timeout: float = 30) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s:\n{proc.output()}") from None


def wait_for(predicate, what: str, *procs, timeout: float = 30) -> None:
    try:
        wait_until(predicate, timeout=timeout)
    except AssertionError:
        outputs = "\n".join(proc.output() for proc in procs)
        raise AssertionError(f"{what} (waited {timeout}s):\n{outputs}") from None


def states(jobs: list[Job]) -> Counter[str]:
    return Counter(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True))


def reloaded(job: Job) -> Job:
    job.refresh_from_db()
    return job


def test_a_runner_that_ignores_its_timeout_is_abandoned_and_the_rest_run(spawn, tmp_path: Path):
    stuck = hangs.enqueue({"until": str(tmp_path / "never")}, priority=-1)
    behind = [record.enqueue({"n": n}) for n in range(3)]

    worker = spawn("runjobs", "--processes", "0", "--burst", "--concurrency", "1")

    assert exit_code(worker) == 0, worker.output()
    stuck = reloaded(stuck)
    assert stuck.state == "failed"
    assert "JOB_TIMEOUT: " in stuck.error and "abandoned" in stuck.error
    assert states(behind) == {"succeeded": 3}
    assert Counter(Execution.objects.values_list("label", flat=True)) == {
        "hang-start": 1,
        "record": 3,
    }
    assert "thread jobs-exec-0 is abandoned" in worker.output()


def test_a_runner_that_exhausts_memory_fails_and_the_worker_goes_on(spawn):
    # MALLOC_ARENA_MAX: the replacement of a thread must not reserve a new 64 MB arena.
    worker = spawn(
        "runjobs", "--processes", "0", "--concurrency", "1", env={"MALLOC_ARENA_MAX": "2"}
    )
    worker.wait_for_output("ready")
    size = _virtual_size(worker.popen.pid)
    resource.prlimit(worker.popen.pid, resource.RLIMIT_AS, (size + HEADROOM, size + HEADROOM))

    hog = hogs.enqueue({"max_mb": 1024}, priority=-1)  # 1 GB: more than the limit allows
    behind = [record.enqueue({"n": n}) for n in range(3)]

    wait_for(
        lambda: states([hog, *behind]) == {"failed": 1, "succeeded": 3},
        "the jobs did not end as expected",
        worker,
    )
    assert reloaded(hog).error.startswith("MAX_ATTEMPTS") and "MemoryError" in hog.error
    worker.popen.send_signal(signal.SIGTERM)
    assert exit_code(worker) == 0, worker.output()


def _virtual_size(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/<pid>/status")


BIG_STACK = 512 * 1024 * 1024  # each new thread reserves this much address space


def test_a_thread_the_system_refuses_leaves_a_slot_vacant_and_the_worker_going(spawn, tmp_path):
    # RLIMIT_STACK at exec is the stack every new thread reserves; the address space is then
    # capped below one more stack: starting a thread fails ("can't start new thread"), while
    # the rest of the worker's work (far smaller allocations) goes on.
    worker = spawn(
        "runjobs",
        "--processes",
        "0",
        "-v",
        "2",  # the slot's return is logged at INFO
        "--concurrency",
        "2",
        prefix=["prlimit", f"--stack={BIG_STACK}", "--"],
        env={"MALLOC_ARENA_MAX": "2"},
    )
    first = record.enqueue({"n": -1})  # once it has run, every thread of the worker is up
    wait_for(lambda: states([first]) == {"succeeded": 1}, "the first job run", worker)
    size = _virtual_size(worker.popen.pid)
    limit = size + BIG_STACK // 2
    # The soft limit only: lowering the hard one could not be undone here.
    resource.prlimit(worker.popen.pid, resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))

    release = tmp_path / "release"
    stuck = hangs.enqueue({"until": str(release)}, priority=-1)
    wait_for(lambda: "slot fewer" in worker.output(), "the hung runner's slot left vacant", worker)
    # The failure goes to the recorder before the slot is refilled: it is stored apart.
    wait_for(lambda: reloaded(stuck).state == "failed", "the hung job failed", worker)
    behind = [record.enqueue({"n": n}) for n in range(3)]
    wait_for(lambda: states(behind) == {"succeeded": 3}, "the jobs behind it run", worker)

    # With room again, the slot gets its thread back; the worker stops cleanly, the hung
    # thread left behind (its job long failed).
    unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    resource.prlimit(worker.popen.pid, resource.RLIMIT_AS, unlimited)
    after = record.enqueue({"n": 3})  # wakes the claim loop, whose round tries again
    wait_for(lambda: "has a thread again" in worker.output(), "the slot filled again", worker)
    wait_for(lambda: states([after]) == {"succeeded": 1}, "the job after it run", worker)
    worker.popen.send_signal(signal.SIGTERM)
    assert exit_code(worker) == 0, worker.output()
    assert "RuntimeError" not in worker.output()  # the refusal was logged, never raised


def test_a_runner_that_ends_the_process_has_its_jobs_reclaimed_after_the_lease(spawn):
    fatal = exits_process.enqueue({"code": 7}, priority=-1)
    behind = [record.enqueue({"n": n}) for n in range(3)]

    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    assert exit_code(first) == 7, first.output()
    assert reloaded(fatal).state == "running"  # nobody is left to say otherwise

    # A worker started later re-asks what the dead one held once its lease ran out; the
    # job that ended the process has no attempt left, so it fails instead of killing this one.
    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_for(
        lambda: states([fatal, *behind]) == {"failed": 1, "succeeded": 3},
        "the dead worker's jobs were not reclaimed",
        first,
        second,
    )
    fatal = reloaded(fatal)
    assert "stopped heartbeating" in fatal.error
    assert Counter(Execution.objects.values_list("label", flat=True))["exit-process"] == 1
    second.popen.send_signal(signal.SIGTERM)
    assert exit_code(second) == 0, second.output()


def test_a_runner_raising_inside_except_or_unprintable_fails_cleanly(spawn):
    chained = raises_in_except.enqueue({"n": 1}, priority=-1)
    unprintable = raises_in_except.enqueue({"unprintable": True}, priority=-1)
    behind = [record.enqueue({"n": n}) for n in range(3)]

    worker = spawn("runjobs", "--processes", "0", "--burst", "--concurrency", "1")

    assert exit_code(worker) == 0, worker.output()
    assert "ValueError: raised while handling the first error" in reloaded(chained).error
    assert "_Unprintable: <the _Unprintable could not be turned into text>" in (
        reloaded(unprintable).error
    )
    assert states([chained, unprintable]) == {"failed": 2}
    assert states(behind) == {"succeeded": 3}
