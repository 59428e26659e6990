"""Workflows under real workers: two children ending at once, and ``kill -9`` inside a spawn."""

from __future__ import annotations

import os
import signal

import pytest

from django_jobs.models import Job
from testproject.jobs import pair, spawn_then_pause
from testproject.models import Execution
from tests.conftest import wait_until

pytestmark = [pytest.mark.process, pytest.mark.engine]

SHORT_LEASE = {"JOBS_LEASE": "1s"}
# Two children ending at the same instant on two workers, this many times (WORKFLOW_RACE_ROUNDS
# sets another number). SQLite's workers poll (no NOTIFY), a round takes longer: fewer rounds.
_DEFAULT_ROUNDS = "200" if os.environ.get("DATABASE_URL") else "20"
RACE_ROUNDS = int(os.environ.get("WORKFLOW_RACE_ROUNDS", _DEFAULT_ROUNDS))


def after_gather(job_id: int) -> int:
    return Execution.objects.filter(job_id=job_id, label="after-gather").count()


def started(job_id: int, n: int) -> bool:
    child = Job.objects.filter(parent_id=job_id, payload__n=n).first()
    return child is not None and Execution.objects.filter(job_id=child.pk).exists()


def test_the_last_two_children_ending_at_once_on_two_workers_wake_the_parent_once(spawn, tmp_path):
    # Each round: a parent with two children that block on one file, on two queues, so that
    # each of the two workers runs one; the file appears and both end at the same moment.
    # The row lock on the parent serializes the two decrements: exactly one sees zero, and
    # the parent's post-gather code runs once.
    # SQLite's workers poll: a short poll keeps each round to the work, not the wait.
    poll = {} if os.environ.get("DATABASE_URL") else {"JOBS_POLL_INTERVAL": "0.1s"}
    workers = [
        spawn("runjobs", "--queues", "default,wf-left", env=poll),
        spawn("runjobs", "--queues", "wf-right", env=poll),
    ]
    for round_ in range(RACE_ROUNDS):
        release = tmp_path / f"release-{round_}"
        parent = pair.enqueue(
            {
                "left": [{"n": 1, "until": str(release), "round": round_}],
                "right": [{"n": 2, "until": str(release), "round": round_}],
            }
        )
        wait_until(
            lambda parent=parent: started(parent.pk, 1) and started(parent.pk, 2),
            message="\n".join(w.output() for w in workers),
        )
        release.touch()
        wait_until(
            lambda parent=parent: Job.objects.get(pk=parent.pk).state == "succeeded",
            message="\n".join(w.output() for w in workers),
        )
        row = Job.objects.get(pk=parent.pk)
        assert row.result == [1, 4]
        assert row.children_pending == 0
        assert after_gather(parent.pk) == 1
        kids = Job.objects.filter(parent_id=parent.pk).values_list("pk", flat=True)
        pids = Execution.objects.filter(job_id__in=list(kids)).values_list("pid", flat=True)
        assert len(set(pids)) == 2  # one child on each worker


KILLS = 3  # kill -9 inside the spawn's transaction this many times in a row


def test_kill_inside_the_spawn_transaction_leaves_no_orphan_and_no_duplicate(spawn, tmp_path):
    spawned, until = tmp_path / "spawned", tmp_path / "never"
    children = [{"n": n} for n in range(3)]
    parent = spawn_then_pause.enqueue(
        {"children": children, "spawned": str(spawned), "until": str(until), "kills": KILLS}
    )
    for attempt in range(1, KILLS + 1):
        worker = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
        marker = tmp_path / f"spawned-{attempt}"
        wait_until(marker.exists, message=worker.output())
        inserted = [int(i) for i in marker.read_text().split(",")]
        assert len(inserted) == 3  # inserted in the open transaction...
        worker.popen.send_signal(signal.SIGKILL)
        worker.popen.wait(timeout=10)
        # ...which the kill rolled back: no child was left behind.
        assert not Job.objects.filter(pk__in=inserted).exists()
        assert not Job.objects.filter(parent_id=parent.pk).exists()
    last = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=SHORT_LEASE)
    wait_until(lambda: Job.objects.get(pk=parent.pk).state == "succeeded", message=last.output())
    row = Job.objects.get(pk=parent.pk)
    assert row.result == [0, 1, 4] and row.attempts == KILLS + 1
    assert Job.objects.filter(parent_id=parent.pk).count() == 3
    assert after_gather(parent.pk) == 1
