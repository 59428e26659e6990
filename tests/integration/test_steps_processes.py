"""Durable steps under real crashes: ``kill -9`` of a ``runjobs`` process mid-job."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from django_jobs.engine.durable.step_writer import LEADERS
from django_jobs.models import Job, JobStep
from django_jobs.testing import run_until_idle
from testproject.jobs import (
    COUNTED_STEPS,
    atomic_then_pause,
    charge,
    cool,
    counted_steps,
    three_steps,
)
from testproject.models import Execution
from tests.conftest import ROOT, on_postgres, wait_until

pytestmark = [pytest.mark.process, pytest.mark.engine]

SHORT_LEASE = {"JOBS_LEASE": "1s"}


def labels(job_id: int) -> list[str]:
    return list(
        Execution.objects.filter(job_id=job_id).order_by("id").values_list("label", flat=True)
    )


def state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def kill_when(proc, predicate) -> None:
    wait_until(predicate, message=f"worker never got there:\n{proc.output()}")
    proc.popen.send_signal(signal.SIGKILL)
    proc.popen.wait(timeout=10)


def test_atomic_step_survives_a_crash_after_its_commit(spawn, tmp_path):
    marker = tmp_path / "go"
    job = atomic_then_pause.enqueue({"until": str(marker)})
    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    kill_when(first, lambda: "after-atomic" in labels(job.pk))
    marker.touch()
    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_until(lambda: state(job.pk) == "succeeded", message=second.output())
    assert labels(job.pk).count("atomic-write") == 1  # written once, not re-run on replay
    assert labels(job.pk).count("after-atomic") == 2  # code outside steps runs again
    step = JobStep.objects.get(job_id=job.pk, name="write")
    assert step.state == "completed" and step.attempts == 1
    assert Job.objects.get(pk=job.pk).attempts == 2


def test_recover_stop_becomes_unknown_and_resolve_moves_it_on(spawn, worker_env, tmp_path):
    marker = tmp_path / "go"
    job = charge.enqueue({"until": str(marker), "recover": "stop"})
    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    kill_when(first, lambda: labels(job.pk))
    marker.touch()
    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_until(lambda: state(job.pk) == "unknown", message=second.output())
    row = Job.objects.get(pk=job.pk)
    assert "resolve" in row.error and JobStep.objects.get(job=row).state == "unknown"
    assert len(labels(job.pk)) == 1  # the interrupted activity was not run again
    resolved = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "jobs",
            "resolve",
            str(job.pk),
            "--step",
            "charge",
            "--as",
            "completed",
            "--value",
            '{"charged": "by hand"}',
        ],
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resolved.returncode == 0, resolved.stderr
    wait_until(lambda: state(job.pk) == "succeeded", message=second.output())
    assert Job.objects.get(pk=job.pk).result == {"charged": "by hand"}
    assert len(labels(job.pk)) == 1


def test_recover_retry_reruns_with_interrupted_and_the_same_key(spawn, tmp_path):
    marker = tmp_path / "go"
    job = charge.enqueue({"until": str(marker), "recover": "retry"})
    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    kill_when(first, lambda: labels(job.pk))
    marker.touch()
    spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_until(lambda: state(job.pk) == "succeeded")
    key = f"steps.charge:{job.pk}:charge"
    assert labels(job.pk) == [
        f"charge key={key} interrupted=False attempt=1",
        f"charge key={key} interrupted=True attempt=2",
    ]


def test_a_crash_mid_plain_step_leaves_no_row_and_the_retry_runs_it_again(spawn, tmp_path):
    # A plain step (no StepInfo, recover="retry") is written once, at its end.
    hold, entered = tmp_path / "release", tmp_path / "entered"
    job = three_steps.enqueue({"n": "crash", "hold": str(hold), "entered": str(entered)})
    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    kill_when(first, entered.exists)
    assert not JobStep.objects.filter(job_id=job.pk).exists()
    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_until(lambda: state(job.pk) == "succeeded", message=second.output())
    done = Job.objects.get(pk=job.pk)
    assert done.attempts == 2
    assert done.result["first"] == {"pid": second.popen.pid, "attempt": 2}
    steps = JobStep.objects.filter(job_id=job.pk)
    assert [(s.name, s.state, s.attempts) for s in steps] == [
        ("first", "completed", 1),
        ("effect", "completed", 1),
        ("last", "completed", 1),
    ]
    assert {s.name: s.value for s in steps} == done.result
    assert labels(job.pk) == ["effect"]


def test_sleep_holds_no_worker_and_a_restart_changes_nothing(spawn):
    job = cool.enqueue({})
    worker = spawn("runjobs", "--concurrency", "1")
    wait_until(lambda: state(job.pk) == "waiting", message=worker.output())
    row = Job.objects.get(pk=job.pk)
    assert row.attempts == 1 and "cool" in row.wait_reason
    assert row.run_at - timezone.now() > timedelta(days=2, hours=23)
    worker.popen.send_signal(signal.SIGTERM)
    assert worker.popen.wait(timeout=30) == 0
    restarted = spawn("runjobs", "--burst")
    assert restarted.popen.wait(timeout=60) == 0
    assert state(job.pk) == "waiting" and labels(job.pk) == ["before-sleep"]
    # Three days later (the clock moves in this process only), a worker finishes it.
    with time_machine.travel(row.run_at + timedelta(seconds=1), tick=False):
        [done] = run_until_idle()
    assert done.pk == job.pk and done.state == "succeeded" and done.attempts == 1
    # Code outside steps runs again on the re-ask; the sleep step itself is done.
    assert labels(job.pk) == ["before-sleep", "before-sleep", "after-sleep"]


def body_runs(job_ids: list[int]) -> Counter[tuple[int, str]]:
    """How many times each (job, step) body ran, from the rows the bodies committed."""
    return Counter(
        Execution.objects.filter(job_id__in=job_ids).values_list("job_id", "label").iterator()
    )


def test_a_kill_mid_drain_reruns_no_step_whose_grouped_write_was_stored(spawn):
    # More threads than leaders: step rows of several threads share a commit
    # (engine/durable/step_writer.py). A kill -9 mid-drain, then a second worker finishes.
    jobs = counted_steps.enqueue_many([{"n": n} for n in range(300)])
    ids = [job.pk for job in jobs]
    first = spawn("runjobs", "--processes", "0", "--concurrency", str(LEADERS * 4), env=SHORT_LEASE)
    kill_when(first, lambda: Execution.objects.filter(job_id__in=ids).count() >= 300)
    stored = set(
        JobStep.objects.filter(job_id__in=ids, state="completed").values_list("job_id", "name")
    )
    assert 0 < len(stored) < len(ids) * len(COUNTED_STEPS)  # killed in the middle
    if on_postgres():  # rows of one transaction share their xmin: some commits held several
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(DISTINCT xmin::text) FROM django_jobs_jobstep WHERE job_id = ANY(%s)",
                [ids],
            )
            assert cursor.fetchone()[0] < len(stored)
    second = spawn(
        "runjobs", "--processes", "0", "--concurrency", str(LEADERS * 4), env=SHORT_LEASE
    )
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, state="succeeded").count() == len(ids),
        timeout=120,
        message=second.output(),
    )
    runs = body_runs(ids)
    assert {key: runs[key] for key in stored} == dict.fromkeys(stored, 1)  # none ran again
    assert set(runs) == {(job_id, name) for job_id in ids for name in COUNTED_STEPS}
    # Only the bodies in flight at the kill ran twice: at most one per thread.
    assert sum(runs.values()) - len(runs) <= LEADERS * 4
