"""Canvas under real workers: a chain of 3 and a chord of 100, built at the call site, survive
``kill -9`` of the worker mid-flow; each member's effect happens once, the callback's once;
hooks run in the worker process."""

from __future__ import annotations

import itertools
import signal
from collections import Counter

import pytest

from django_jobs import chain, group
from django_jobs.models import Job
from testproject.jobs import canvas_add, canvas_hooked, canvas_total
from testproject.models import Execution
from tests.conftest import wait_until

pytestmark = [pytest.mark.process, pytest.mark.engine]

SHORT_LEASE = {"JOBS_LEASE": "1s"}


def effect_counts(prefix: str) -> Counter[str]:
    return Counter(
        Execution.objects.filter(label__startswith=prefix).values_list("label", flat=True)
    )


def kill(worker) -> None:
    worker.popen.send_signal(signal.SIGKILL)
    worker.popen.wait(timeout=10)


def ended(job_id: int) -> bool:
    return Job.objects.get(pk=job_id).state in ("succeeded", "failed", "cancelled")


def test_a_chain_of_three_survives_kill_9_of_its_worker(spawn, tmp_path):
    release = tmp_path / "release"
    flow = chain(
        canvas_add.s({"n": 1}),
        canvas_add.s({"n": 2, "until": str(release)}),
        canvas_add.s({"n": 3}),
    ).enqueue()
    worker = spawn("runjobs", "--concurrency", "2", env=SHORT_LEASE)
    wait_until(
        lambda: Job.objects.filter(parent_id=flow.pk, payload__n=2, state="running").exists(),
        message=worker.output(),
    )
    kill(worker)  # the second link is running, the flow waits on it
    assert effect_counts("canvas.add") == {"canvas.add:1": 1}
    release.touch()
    again = spawn("runjobs", "--concurrency", "2", env=SHORT_LEASE)
    wait_until(lambda: ended(flow.pk), timeout=60, message=again.output())
    row = Job.objects.get(pk=flow.pk)
    assert row.state == "succeeded" and row.result == 6
    assert effect_counts("canvas.add") == {"canvas.add:1": 1, "canvas.add:2": 1, "canvas.add:3": 1}
    kids = Job.objects.filter(parent_id=flow.pk)
    assert kids.count() == 3 and {k.state for k in kids} == {"succeeded"}
    assert row.children_pending == 0


def test_a_chord_of_100_survives_kill_9_of_its_worker_and_calls_back_once(spawn, tmp_path):
    flow = chain(
        group(canvas_add.s({"n": n, "pause": 0.03}) for n in range(100)),
        canvas_total.s({"tag": "kill"}),
    ).enqueue()
    worker = spawn("runjobs", "--concurrency", "2", env=SHORT_LEASE)
    wait_until(lambda: sum(effect_counts("canvas.add").values()) >= 20, message=worker.output())
    kill(worker)
    done_before = sum(effect_counts("canvas.add").values())
    assert done_before < 100, "the chord ended before the kill: slow its members down"
    again = spawn("runjobs", "--concurrency", "2", env=SHORT_LEASE)
    wait_until(lambda: ended(flow.pk), timeout=120, message=again.output())
    row = Job.objects.get(pk=flow.pk)
    assert row.state == "succeeded", row.error
    assert row.result == {"sum": sum(range(100)), "count": 100}
    members = effect_counts("canvas.add")
    assert len(members) == 100 and set(members.values()) == {1}  # each member's effect once
    assert effect_counts("canvas.total") == {"canvas.total:kill": 1}  # the callback once
    assert Job.objects.filter(parent_id=flow.pk).count() == 101


def test_hooks_run_in_the_worker_with_the_exception(spawn, tmp_path):
    hooks = str(tmp_path)
    failing = canvas_hooked.enqueue({"fail": True, "hooks": hooks})
    fine = canvas_hooked.enqueue({"hooks": hooks})
    worker = spawn("runjobs", "--burst", "--concurrency", "1")
    assert worker.wait() == 0, worker.output()
    lines = (tmp_path / "hooks.log").read_text().splitlines()
    assert sorted(lines) == sorted(
        [
            f"retry {failing.pk} queued ValueError attempt 1 last=False",
            f"failure {failing.pk} failed ValueError attempt 2 last=True",
            f"success {fine.pk} succeeded None None",
        ]
    )


def test_a_batch_loop_enqueueing_itself_behind_runs_every_batch_in_a_worker(spawn):
    from testproject.jobs import canvas_batch

    canvas_batch.enqueue({"name": "worker-loop", "left": 4})
    worker = spawn("runjobs", "--burst", "--concurrency", "2")
    assert worker.wait() == 0, worker.output()
    runs = list(Job.objects.filter(kind="canvas.batch").order_by("pk"))
    assert [r.result for r in runs] == [4, 3, 2, 1]
    assert {r.state for r in runs} == {"succeeded"}
    assert all(a.ended_at <= b.started_at for a, b in itertools.pairwise(runs))


def test_a_worker_of_the_members_queue_alone_finishes_the_flow(spawn):
    flow = chain(
        canvas_add.s({"n": 1}, queue="webhooks"),
        group(canvas_add.s({"n": 2}, queue="webhooks"), canvas_add.s({"n": 2}, queue="webhooks")),
    ).enqueue()
    worker = spawn("runjobs", "--queues", "webhooks", "--burst", "--concurrency", "2")
    assert worker.wait() == 0, worker.output()
    row = Job.objects.get(pk=flow.pk)
    assert row.queue == "webhooks"
    assert row.state == "succeeded", (row.state, worker.output())
    assert row.result == [3, 3]


def test_a_group_of_100_equal_members_under_kill_9_runs_each_once_and_the_body_once(spawn):
    flow = chain(
        group(canvas_add.s({"n": 1, "pause": 0.03}) for _ in range(100)),
        canvas_total.s({"tag": "equal"}),
    ).enqueue()
    worker = spawn("runjobs", "--concurrency", "2", env=SHORT_LEASE)
    wait_until(lambda: sum(effect_counts("canvas.add").values()) >= 20, message=worker.output())
    kill(worker)
    assert sum(effect_counts("canvas.add").values()) < 100, "ended before the kill: slow it down"
    again = spawn("runjobs", "--concurrency", "2", env=SHORT_LEASE)
    wait_until(lambda: ended(flow.pk), timeout=120, message=again.output())
    row = Job.objects.get(pk=flow.pk)
    assert row.state == "succeeded", row.error
    assert row.result == {"sum": 100, "count": 100}
    members = Job.objects.filter(parent_id=flow.pk, kind="canvas.add")
    assert members.count() == 100
    per_member = Counter(
        Execution.objects.filter(label="canvas.add:1").values_list("job_id", flat=True)
    )
    assert set(per_member) == set(members.values_list("pk", flat=True))
    assert set(per_member.values()) == {1}  # each member's effect exactly once
    assert effect_counts("canvas.total") == {"canvas.total:equal": 1}  # the body once
