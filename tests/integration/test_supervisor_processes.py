"""``runjobs --processes N`` with real processes, on PostgreSQL and SQLite: a parent that runs no
job and N worker processes under it. Two children run jobs in two pids; a job past its hard
time limit has its child ended and fails with ``JOB_TIMEOUT``; a child killed with SIGKILL has
its jobs ended with ``WORKER_LOST`` within 2 s while its sibling's job finishes;
``--max-jobs-per-child`` recycles, and a replacement claims only after the last claim of the child
it replaces; SIGHUP under load loses no job and runs none twice; a child
that cannot import the project is restarted with backoff while the parent stays up and says why.

The subprocesses read the real clock: the tests wait on the other processes (``wait_for``),
never on time.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from django_jobs.models import Job
from testproject.jobs import async_past_its_hard_limit, busy, past_its_hard_limit, record, slow
from testproject.models import Execution
from tests.integration.test_worker_processes import exit_code, terminate, wait_for

# Worker processes killed, ended past their limits and signalled: the same on every Django
# version (the `engine` marker).
pytestmark = [pytest.mark.process, pytest.mark.engine]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def refreshed(job: Job) -> Job:
    job.refresh_from_db()
    return job


def started_pids(label: str) -> dict[int, int]:
    """job id -> the pid that ran it, for the executions labelled ``label``."""
    return dict(Execution.objects.filter(label=label).values_list("job_id", "pid"))


def test_two_children_run_jobs_in_two_pids(spawn, tmp_path):
    marker = tmp_path / "go"
    jobs = [slow.enqueue({"until": str(marker), "n": n}) for n in range(2)]
    worker = spawn("runjobs", "--processes", "2", "--concurrency", "1", "--no-scheduler")
    wait_for(lambda: len(started_pids("slow-start")) == 2, "both jobs started", worker)
    pids = set(started_pids("slow-start").values())
    assert len(pids) == 2  # one job in each child, side by side
    assert worker.popen.pid not in pids  # the parent runs no job
    marker.touch()
    wait_for(lambda: all(refreshed(job).state == "succeeded" for job in jobs), "jobs done", worker)
    assert terminate(worker) == 0


@pytest.mark.parametrize(
    "handle", [past_its_hard_limit, async_past_its_hard_limit], ids=["def", "async def"]
)
def test_a_job_past_its_hard_limit_is_ended_with_job_timeout(spawn, handle):
    job = handle.enqueue({"seconds": 60})
    worker = spawn("runjobs", "--processes", "1", "--no-scheduler")
    wait_for(lambda: job.pk in started_pids("hard-limit-start"), "job started", worker)
    began = time.monotonic()
    wait_for(lambda: refreshed(job).state == "failed", "failed by its hard limit", worker)
    assert time.monotonic() - began < 10
    # Recorded failed at the limit, by the child, while its thread sleeps on in the C call.
    assert job.error.splitlines()[0] == "JOB_TIMEOUT: stopped at its time limit of 2s"
    # Its thread is still in the C call a second later: the child is ended for it.
    worker.wait_for_output("did not stop at its time limit of 2s")
    # A new child took its place: the next job runs.
    later = record.enqueue({"after": "timeout"})
    wait_for(lambda: refreshed(later).state == "succeeded", "a new child runs jobs", worker)
    # The line after the sleep never ran: its process was ended inside the C call.
    assert not Execution.objects.filter(label="hard-limit-after-sleep").exists()


def test_a_killed_child_has_its_job_ended_within_2s_while_its_sibling_finishes(spawn, tmp_path):
    marker = tmp_path / "go"
    first, second = (slow.enqueue({"until": str(marker), "n": n}) for n in range(2))
    worker = spawn("runjobs", "--processes", "2", "--concurrency", "1", "--no-scheduler")
    wait_for(lambda: len(started_pids("slow-start")) == 2, "both jobs started", worker)
    victim = started_pids("slow-start")[first.pk]
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    wait_for(
        lambda: (refreshed(first).error or "").startswith("WORKER_LOST"),
        "the killed child's job ended",
        worker,
        timeout=10,
    )
    assert time.monotonic() - killed < 2
    assert first.error.splitlines()[0] == (
        f"WORKER_LOST: worker process {victim} died (signal 9) while running this job"
    )
    assert first.attempts == 1  # the attempt counted
    marker.touch()
    wait_for(lambda: refreshed(second).state == "succeeded", "the sibling's job", worker)
    # The lost job's retry ran in the child that replaced the dead one, and succeeded.
    wait_for(lambda: refreshed(first).state == "succeeded", "the retried job", worker)
    assert first.attempts == 2
    assert Execution.objects.get(job_id=second.pk, label="slow-end").pid != victim


def test_max_jobs_per_child_recycles(spawn):
    jobs = [record.enqueue({"n": n}) for n in range(6)]
    worker = spawn(
        "runjobs",
        "--processes",
        "1",
        "--concurrency",
        "1",
        "--max-jobs-per-child",
        "2",
        "--burst",
        "--no-scheduler",
    )
    assert exit_code(worker) == 0, worker.output()
    assert all(refreshed(job).state == "succeeded" for job in jobs)
    per_pid = Counter(started_pids("record").values())
    assert sorted(per_pid.values()) == [2, 2, 2], worker.output()


def test_a_recycled_childs_replacement_claims_only_after_its_last_claim(spawn):
    # Jobs of 0.3 s: the replacement is ready while the child it replaces still has its last
    # job to claim. It waits at its gate until then, so each child runs three jobs in a row,
    # in the order they were queued, and none is claimed ahead only to be handed back.
    jobs = [slow.enqueue({"n": n, "seconds": 0.3}) for n in range(12)]
    worker = spawn(
        "runjobs",
        "--processes",
        "1",
        "--concurrency",
        "1",
        "--max-jobs-per-child",
        "3",
        "--burst",
        "--no-scheduler",
        env={"JOBS_LOG_LEVEL": "INFO"},
    )
    assert exit_code(worker) == 0, worker.output()
    assert all(refreshed(job).state == "succeeded" and job.attempts == 1 for job in jobs)
    ran_by = started_pids("slow-start")
    pids = [ran_by[job.pk] for job in jobs]
    assert pids == [pid for pid in dict.fromkeys(pids) for _ in range(3)], pids
    assert "handed back" not in worker.output()
    assert "queued again" not in worker.output()


def test_sighup_under_load_loses_none_and_runs_none_twice(spawn):
    # Two SIGHUPs, each in the middle of a drain of 1,000 jobs; the next 1,000 go in once the
    # new generation is ready, so each generation runs some.
    worker = spawn("runjobs", "--processes", "2", "--concurrency", "4", "--no-scheduler")
    jobs: list[Job] = []
    for generation in range(1, 3):
        jobs += [record.enqueue({"n": n, "batch": generation}) for n in range(1000)]
        if generation == 1:
            worker.wait_for_output("runjobs: worker ")
        mark = len(jobs) - 750
        wait_for(lambda m=mark: succeeded() >= m, "jobs running", worker)
        worker.popen.send_signal(signal.SIGHUP)
        ready = 2 * (generation + 1)
        wait_for(
            lambda r=ready: worker.output().count("runjobs: worker ") >= r,
            "the new generation ready",
            worker,
            timeout=60,
        )
    wait_for(lambda: succeeded() == len(jobs), "every job done", worker, timeout=60)
    ran = Counter(Execution.objects.filter(label="record").values_list("job_id", flat=True))
    assert set(ran) == {job.pk for job in jobs}  # none lost
    assert max(ran.values()) == 1  # none run twice
    assert len(set(started_pids("record").values())) >= 3  # a new generation ran jobs too
    assert worker.output().count("SIGHUP: starting new worker processes") == 2
    assert terminate(worker) == 0


def succeeded() -> int:
    return Job.objects.filter(state="succeeded").count()


def test_a_child_that_cannot_start_is_restarted_with_backoff_and_the_parent_says_why(
    spawn, tmp_path
):
    broken = tmp_path / "broken"
    broken.touch()
    worker = spawn(
        "runjobs", "--processes", "1", "--no-scheduler", env={"JOBS_TEST_BROKEN": str(broken)}
    )
    worker.wait_for_output("starting another in 1s", timeout=60)
    worker.wait_for_output("starting another in 2s", timeout=60)
    assert worker.popen.poll() is None  # the parent stays up
    assert "before it was ready" in worker.output()
    assert "ImportError: a broken import" in worker.output()  # the child's own error
    broken.unlink()
    job = record.enqueue({"n": "after the fix"})
    wait_for(lambda: refreshed(job).state == "succeeded", "a child started at last", worker)
    assert terminate(worker) == 0


def test_without_processes_the_worker_says_only_soft_limits_hold(spawn):
    worker = spawn("runjobs", "--processes", "0", "--burst", "--no-scheduler")
    assert exit_code(worker) == 0
    assert "only soft time limits (timeout=) hold here" in worker.output()
    assert "test.hard_limit" in worker.output()


def test_a_new_generation_that_cannot_start_leaves_the_old_one_running(spawn, tmp_path):
    broken = tmp_path / "broken"
    worker = spawn(
        "runjobs", "--processes", "1", "--no-scheduler", env={"JOBS_TEST_BROKEN": str(broken)}
    )
    worker.wait_for_output("runjobs: worker ")
    broken.touch()  # the code deployed next fails at import
    worker.popen.send_signal(signal.SIGHUP)
    worker.wait_for_output("before it was ready", timeout=60)
    job = record.enqueue({"n": "served by the old code"})
    wait_for(lambda: refreshed(job).state == "succeeded", "the old child runs jobs", worker)
    (pid,) = set(started_pids("record").values())
    broken.unlink()  # fixed: the next start of the new generation takes over
    wait_for(lambda: not alive(pid), "the old child stops once a new one is ready", worker)
    later = record.enqueue({"n": "served by the new code"})
    wait_for(lambda: refreshed(later).state == "succeeded", "the new child runs jobs", worker)
    assert Execution.objects.get(job_id=later.pk).pid != pid
    assert terminate(worker) == 0


@pytest.mark.parametrize("processes", ["0", "1"])
def test_sigusr1_prints_every_threads_stack_and_the_worker_goes_on(spawn, tmp_path, processes):
    """``kill -USR1``: where each thread is, as Celery's worker answers it. Under a supervisor
    the parent prints its own stack and passes the signal to its worker processes, each of
    which prints theirs: the running job's frame is among them. Nothing stops."""
    marker = tmp_path / "go"
    job = slow.enqueue({"until": str(marker), "n": 0})
    worker = spawn("runjobs", "--processes", processes, "--concurrency", "1", "--no-scheduler")
    wait_for(lambda: job.pk in started_pids("slow-start"), "job started", worker)
    worker.popen.send_signal(signal.SIGUSR1)
    # The job's own frame, in the process that runs it (the child, under a supervisor).
    wait_for(lambda: "in slow\n" in worker.output(), "the running job's stack", worker)
    output = worker.output()
    assert "(most recent call first)" in output
    assert output.count("Current thread") + output.count("Thread 0x") >= 2
    # Each thread headed by its name: the one that printed (the worker's signal thread).
    assert "(jobs-signals) (most recent call first)" in output
    # Each process's block headed by its pid and worker; the job's thread by its job.
    runs_it = started_pids("slow-start")[job.pk]
    worker_name = refreshed(job).worker_id.rsplit(":", 2)[0]
    assert f"Process {runs_it} (worker {worker_name}):\n" in output
    [heading] = [line for line in output.splitlines() if f" job {job.pk} " in line]
    assert heading.startswith("Thread 0x") and heading.endswith(
        f"(jobs-exec-0) job {job.pk} (test.slow, attempt 1) (most recent call first):"
    )
    # The frames under that heading are the job's.
    block = output.split(heading, 1)[1].split("\n\n", 1)[0]
    assert "in slow\n" in block + "\n"
    if processes == "1":
        # The parent's own stack too: its loop, where it acts on the signal.
        assert "in _handle_signals\n" in output
        parent = worker.popen.pid
        assert f"Process {parent} (supervisor of worker {worker_name}):\n" in output
    marker.touch()
    wait_for(lambda: refreshed(job).state == "succeeded", "the job finished", worker)
    assert terminate(worker) == 0


@pytest.mark.parametrize("processes", ["0", "1"])
def test_stack_dumps_of_a_job_busy_in_python_never_crash_the_worker(spawn, tmp_path, processes):
    """A dump that read the threads' frames from a C signal handler while they ran
    (faulthandler's) crashed a busy process within a few hundred dumps: a job's frames freed
    under it. A hundred dumps here, each awaited in the output, and the job still succeeds."""
    marker = tmp_path / "go"
    job = busy.enqueue({"until": str(marker)})
    worker = spawn("runjobs", "--processes", processes, "--concurrency", "1", "--no-scheduler")
    wait_for(lambda: job.pk in started_pids("busy-start"), "job started", worker)
    for dumps in range(1, 101):
        worker.popen.send_signal(signal.SIGUSR1)
        wait_for(lambda n=dumps: worker.output().count("in busy\n") >= n, f"dump {dumps}", worker)
    marker.touch()
    wait_for(lambda: refreshed(job).state == "succeeded", "the job finished", worker)
    assert worker.output().count("in busy\n") == 100
    assert terminate(worker) == 0


# As ``Event.wait`` holds its condition's lock when it wakes, this script's main thread holds
# the worker's ``wake`` lock when SIGTERM lands, and runs bytecodes (where Python runs its
# handlers) before it lets go. A handler that set the event there would wait for its own
# thread forever: the worker would never stop.
SIGNAL_UNDER_LOCK = """
import os, signal, django
django.setup()
from django_jobs.engine.worker.worker import Worker
worker = Worker(concurrency=1, scheduler=False, fleet_row=False)
worker.install_signal_handlers()
with worker.wake._cond:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100_000):
        pass
# The signal thread sets stopping, then wake (once the lock above is let go).
stopped = worker.stopping.wait(10) and worker.wake.wait(10)
print("stopping" if stopped else "running", flush=True)
"""


def test_a_sigterm_that_lands_while_the_claim_loop_holds_its_wake_lock_still_stops_the_worker(
    worker_env,
):
    import subprocess
    import sys

    try:
        done = subprocess.run(
            [sys.executable, "-c", SIGNAL_UNDER_LOCK],
            env=worker_env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the worker hung on its own lock:\n{exc.stderr}") from None
    assert done.stdout.strip() == "stopping", done.stderr
