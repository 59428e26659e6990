"""The history of every attempt (SPEC §18), on PostgreSQL and SQLite: a job that failed, then
succeeded, shows both runs in the admin's job page, ``jobs inspect`` (text and ``--json``),
the API (everything for operators; start, end, outcome and the error's first line for the
member who owns it) and the MCP job tool. The store keeps the newest 50 entries, and the runs
that end outside a worker's own record (a lease's rescue, a requeue for another job's time
limit) write theirs in the same statement.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import clock
from django_jobs.attempt_history import ATTEMPT_KEYS, MEMBER_ATTEMPT_KEYS
from django_jobs.models import Job
from django_jobs.serialize import job_json
from django_jobs.store import Outcome, get_store
from django_jobs.store.base.history import HISTORY_KEPT
from django_jobs.testing import run_until_idle
from testproject.jobs import fails_once, noop
from tests.conftest import claim

FIRST_LINE = "ValueError: the first attempt fails"


def failed_then_succeeded(owner=None) -> Job:
    job = fails_once.enqueue({"n": 1}, owner=owner)
    run_until_idle()
    job.refresh_from_db()
    assert job.state == "succeeded" and job.attempts == 2
    return job


def assert_operators_history(history: list[dict]) -> None:
    """Both runs, oldest first, with everything: worker, pid and the traceback."""
    assert [list(entry) for entry in history] == [list(ATTEMPT_KEYS)] * 2
    first, second = history
    assert (first["attempt"], first["outcome"]) == (1, "retrying")
    assert (second["attempt"], second["outcome"]) == (2, "succeeded")
    for entry in history:
        assert entry["worker"] == "inline"  # run_until_idle's worker
        assert entry["pid"] == os.getpid()  # the process that ran it
        assert entry["started_at"] <= entry["ended_at"]
    assert first["ended_at"] <= second["started_at"]
    assert first["error"] == FIRST_LINE
    assert first["traceback"].startswith(FIRST_LINE + "\nsecond line of the message")
    assert "Traceback (most recent call last)" in first["traceback"]
    assert "in fails_once" in first["traceback"]
    assert second["error"] is None and second["traceback"] is None


@pytest.mark.django_db
def test_a_failure_then_a_success_shows_both_attempts_everywhere(api_users, api_client, client):
    job = failed_then_succeeded(owner=api_users.member)
    operators = job_json(job)["attempt_history"]
    assert_operators_history(operators)
    assert job_json(job)["attempts"] == 2  # still the count

    # jobs inspect --json, and its text page.
    out = StringIO()
    call_command("jobs", "inspect", str(job.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["attempt_history"] == operators
    out = StringIO()
    call_command("jobs", "inspect", str(job.pk), stdout=out)
    page = out.getvalue()
    assert "Attempts:" in page
    lines = page.split("Attempts:", 1)[1].splitlines()
    assert lines[1].split()[:2] == ["#", "STARTED"]
    assert "retrying" in lines[2] and FIRST_LINE in lines[2] and str(os.getpid()) in lines[2]
    assert "succeeded" in lines[3] and "inline" in lines[3]

    # The API: the operator sees it all, as job_json does.
    answer = api_client(api_users.operator).get(f"/api/jobs/{job.pk}/").json()
    assert answer["attempt_history"] == operators
    listed = api_client(api_users.operator).get("/api/jobs/").json()["results"]
    assert [row["attempt_history"] for row in listed if row["id"] == job.pk] == [operators]

    # The member who owns it: start, end, outcome and the error's first line; no worker, no
    # process, no traceback.
    mine = api_client(api_users.member).get(f"/api/jobs/{job.pk}/").json()["attempt_history"]
    assert [list(entry) for entry in mine] == [list(MEMBER_ATTEMPT_KEYS)] * 2
    assert mine == [{key: entry[key] for key in MEMBER_ATTEMPT_KEYS} for entry in operators]
    assert mine[0]["error"] == FIRST_LINE
    assert "Traceback" not in json.dumps(mine) and "second line" not in json.dumps(mine)

    # The admin's job page: a table of the attempts, the traceback folded under each error.
    client.force_login(api_users.superuser)
    html = client.get(f"/admin/django_jobs/job/{job.pk}/change/").content.decode()
    table = html.split('id="djj-attempts"', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr data-attempt=")[1:]
    assert len(rows) == 2
    assert 'data-outcome="retrying"' in rows[0] and 'data-outcome="succeeded"' in rows[1]
    assert f'<td class="djj-pid">{os.getpid()}</td>' in rows[0]
    assert "<td>inline</td>" in rows[0] and "<td>inline</td>" in rows[1]
    assert FIRST_LINE in rows[0] and "<details" in rows[0]
    assert "Traceback (most recent call last)" in rows[0]
    assert "<details" not in rows[1]


def test_the_mcp_job_tool_shows_the_history(worker_env, tmp_path):
    from tests.integration.test_mcp import cli_json, mcp_session, tool_json

    job = failed_then_succeeded()
    _, [result] = mcp_session(
        worker_env, tmp_path / "mcp.log", [("inspect_job", {"job_id": job.pk})]
    )
    history = tool_json(result)["attempt_history"]
    assert_operators_history(history)
    assert history == cli_json("inspect", job.pk)["attempt_history"]
    doc = json.loads(result.content[0].text)
    assert "$.data.attempt_history[*].traceback" in doc["untrusted_fields"]


# -- the store: every way a run ends writes its entry ---------------------------------------


def running(worker_id: str = "w") -> Job:
    noop.enqueue({"at": str(clock.now())})
    [job] = claim(worker_id)
    return job


@pytest.mark.django_db
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(kept=st.integers(min_value=0, max_value=HISTORY_KEPT))
def test_the_newest_fifty_entries_are_kept(kept):
    # Any history the store can have written (at most HISTORY_KEPT entries), one more run.
    Job.objects.all().delete()
    job = running()
    before = [{"attempt": n, "outcome": "retrying"} for n in range(kept)]
    Job.objects.filter(pk=job.pk).update(attempt_history=before)
    now = clock.now()
    outcome = Outcome(
        job_id=job.pk, worker_id="w", state="queued", started_at=now, ended_at=now,
        error="RuntimeError: again", attempt=kept + 1, pid=4242,
    )  # fmt: skip
    assert get_store().record([outcome]) == [job.pk]
    job.refresh_from_db()
    history = job.attempt_history
    assert len(history) == min(kept + 1, HISTORY_KEPT)
    assert history[:-1] == before[-(HISTORY_KEPT - 1) :] if kept else history[:-1] == []
    assert history[-1]["attempt"] == kept + 1 and history[-1]["pid"] == 4242
    assert history[-1]["outcome"] == "retrying" and history[-1]["error"] == "RuntimeError: again"


@pytest.mark.django_db
def test_a_rescued_attempt_is_lost_with_its_worker_named():
    job = running("host-a:77:default:0123abcd")
    Job.objects.filter(pk=job.pk).update(leased_until=clock.now() - timedelta(seconds=1))
    error = "The worker stopped heartbeating.\nmore"
    assert get_store().rescue(engine="default", now=clock.now(), error=error) == [
        (job.pk, "queued")
    ]
    job.refresh_from_db()
    [entry] = job_json(job)["attempt_history"]
    assert entry["attempt"] == 1 and entry["outcome"] == "lost"
    assert entry["worker"] == "host-a:77" and entry["pid"] is None
    assert entry["error"] == "The worker stopped heartbeating." and entry["traceback"] == error
    assert entry["started_at"] == job_json(Job(started_at=job.started_at))["started_at"]
    assert entry["ended_at"] >= entry["started_at"]


@pytest.mark.django_db
def test_a_started_job_handed_back_is_requeued_and_an_unstarted_one_has_no_entry():
    started = running("host-b:1:default:0123abcd")
    unstarted = running("host-b:1:default:0123abcd")
    store = get_store()
    reason = "requeued: its worker process was ended for job 1's time limit"
    assert store.hand_back("host-b:1:default:0123abcd", [started.pk], reason, pid=555) == 1
    assert store.hand_back("host-b:1:default:0123abcd", [unstarted.pk]) == 1
    started.refresh_from_db()
    unstarted.refresh_from_db()
    assert started.attempts == 0 and unstarted.attempts == 0  # no attempt used
    [entry] = job_json(started)["attempt_history"]
    assert (entry["attempt"], entry["outcome"], entry["pid"]) == (1, "requeued", 555)
    assert entry["worker"] == "host-b:1" and entry["error"] == reason
    assert unstarted.attempt_history == []


# -- a real worker process killed while it runs the job -------------------------------------


@pytest.mark.process
@pytest.mark.engine
def test_a_killed_child_leaves_a_lost_entry_with_its_pid_then_the_success(spawn, tmp_path):
    from testproject.jobs import slow
    from testproject.models import Execution
    from tests.integration.test_supervisor_processes import refreshed, started_pids
    from tests.integration.test_worker_processes import wait_for

    marker = tmp_path / "go"
    job = slow.enqueue({"until": str(marker)})
    worker = spawn(
        "runjobs", "--processes", "1", "--concurrency", "1", "--no-scheduler", "--name", "hist-w"
    )
    wait_for(lambda: job.pk in started_pids("slow-start"), "the job started", worker)
    victim = started_pids("slow-start")[job.pk]
    assert victim != worker.popen.pid  # the child runs it, not the supervisor
    os.kill(victim, 9)
    marker.touch()
    wait_for(lambda: refreshed(job).state == "succeeded", "the retried job", worker, timeout=30)
    lost, succeeded = job_json(job)["attempt_history"]
    assert (lost["attempt"], lost["outcome"], lost["pid"]) == (1, "lost", victim)
    assert lost["error"] == (
        f"WORKER_LOST: worker process {victim} died (signal 9) while running this job"
    )
    assert lost["worker"] == "hist-w" and lost["ended_at"] >= lost["started_at"]
    ran = Execution.objects.get(job_id=job.pk, label="slow-end").pid
    assert (succeeded["attempt"], succeeded["outcome"], succeeded["pid"]) == (2, "succeeded", ran)
    assert ran != victim and succeeded["worker"] == "hist-w"
    assert succeeded["started_at"] >= lost["ended_at"]


@pytest.mark.django_db
def test_each_way_a_run_ends_names_its_outcome():
    from django_jobs import JobTimeout, cancel
    from django_jobs.engine.run.executor import Executor
    from django_jobs.exceptions import WorkerLost
    from testproject.jobs import keeps_requeueing

    # A run that suspends ends; its attempt goes on (the next run has the same number).
    waiting = keeps_requeueing.enqueue({"w": 1})
    run_until_idle()
    waiting.refresh_from_db()
    [entry] = job_json(waiting)["attempt_history"]
    assert (entry["attempt"], entry["outcome"], entry["error"]) == (1, "waiting", None)

    # Stopped at its time limit, its process lost, cancelled: each says so.
    store = get_store()
    ended = {}
    for name, end in (
        ("timed_out", lambda e, job: e.crashed(job, JobTimeout("stopped at its time limit"))),
        ("lost", lambda e, job: e.crashed(job, WorkerLost("worker process 7 died"))),
        ("cancelled", lambda e, job: e.run(Job.objects.get(pk=job.pk))),
    ):
        Job.objects.all().delete()  # the claim below takes this one job
        job = running()
        if name == "cancelled":
            cancel(job.pk)
        assert store.record([end(Executor("w"), job)]) == [job.pk]
        job.refresh_from_db()
        [ended[name]] = job_json(job)["attempt_history"]
    assert {name: entry["outcome"] for name, entry in ended.items()} == {
        "timed_out": "timed_out",
        "lost": "lost",
        "cancelled": "cancelled",
    }
    assert ended["timed_out"]["error"] == "JOB_TIMEOUT: stopped at its time limit"
    assert ended["lost"]["error"] == "WORKER_LOST: worker process 7 died"
    assert ended["cancelled"]["error"].startswith("CANCELLED: ")
    assert all(entry["pid"] == os.getpid() for entry in ended.values())
