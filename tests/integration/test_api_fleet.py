"""The API's fleet endpoints: ``GET workers/``, ``GET queues/``, ``POST queues/{name}/pause/``
and ``resume/`` (operators only), and ``worker`` in a running job's JSON (operators only)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest
import time_machine

from django_jobs.engine.rows import fleet
from django_jobs.engine.worker.worker import make_worker_id
from django_jobs.events.payloads import (
    OPERATORS_CHANNEL,
    member_text,
    text_for_channel,
    user_channel,
)
from django_jobs.models import JobEventRecord, PausedQueue
from django_jobs.serialize import event_text, member_view
from django_jobs.testing import run_until_idle
from testproject.jobs import noop, report
from tests.conftest import claim

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def member(api_users, api_client):
    return api_client(api_users.member)


@pytest.fixture
def operator(api_users, api_client):
    return api_client(api_users.operator)


def test_workers_are_for_operators_only(member, operator, api_client, api_users):
    with time_machine.travel(T0, tick=False):
        process = fleet.process_entry(
            slot=0,
            pid=78,
            generation=0,
            started_at=T0,
            rss_bytes=50 * 2**20,
            jobs_done=4,
            restarts=1,
            jobs=[],
        )
        fleet.register(
            "box-1",
            queues=["mail"],
            concurrency=3,
            pid=77,
            hostname="host-a",
            processes_detail=[process],
        )
        job = noop.enqueue({"w": 1})
        claim(make_worker_id("default", "box-1"))
        refused = member.get("/api/jobs/workers/")
        assert api_client().get("/api/jobs/workers/").status_code == 401
        assert refused.status_code == 403
        assert refused.json()["message"].startswith("Only operators may do this.")
        response = operator.get("/api/jobs/workers/")
    assert response.status_code == 200
    [row] = response.json()
    assert row == {
        "name": "box-1",
        "hostname": "host-a",
        "pid": 77,
        "engine": "default",
        "queues": ["mail"],
        "processes": 1,
        "concurrency": 3,
        "started_at": T0.isoformat(),
        "heartbeat_at": T0.isoformat(),
        "heartbeat_age_s": 0.0,
        "state": "running",
        "jobs_running": 0,
        "jobs_done": 0,
        "running_jobs": [job.pk],
        "version": row["version"],
        "processes_detail": [
            {
                "slot": 0,
                "pid": 78,
                "generation": 0,
                "started_at": T0.isoformat(),
                "rss_bytes": 50 * 2**20,
                "jobs_done": 4,
                "restarts": 1,
                "jobs": [],
            }
        ],
    }
    assert row["version"]


def test_a_running_job_names_its_worker_to_operators_only(member, operator, api_users):
    job = report.enqueue({"title": "t", "rows": 1}, owner=api_users.member)
    assert operator.get(f"/api/jobs/{job.pk}/").json()["worker"] is None
    claim(make_worker_id("default", "box-9"))
    seen = operator.get(f"/api/jobs/{job.pk}/").json()
    # The process that claimed it: this one (the claim's worker id carries it).
    assert (seen["worker"], seen["worker_pid"]) == ("box-9", os.getpid())
    [listed] = operator.get("/api/jobs/").json()["results"]
    assert (listed["worker"], listed["worker_pid"]) == ("box-9", os.getpid())
    # Its owner sees it running, not where: the keys are not there at all (SPEC §15).
    mine = member.get(f"/api/jobs/{job.pk}/").json()
    assert mine["state"] == "running" and not {"worker", "worker_pid"} & set(mine)
    [listed] = member.get("/api/jobs/").json()["results"]
    assert listed["state"] == "running" and not {"worker", "worker_pid"} & set(listed)
    assert "box-9" not in member.get("/api/jobs/").content.decode()


def test_a_members_events_and_demo_page_never_name_the_worker(api_users, client):
    job = report.enqueue({"title": "t", "rows": 1}, owner=api_users.member)
    claim(make_worker_id("default", "box-9"))
    job.refresh_from_db()
    # The stored event text is the operators'; the owner receives the member's text of it.
    text = event_text("job.started", job, job.started_at)
    assert json.loads(text)["job"]["worker"] == "box-9"
    assert text_for_channel(text, OPERATORS_CHANNEL) == text
    owners = json.loads(text_for_channel(text, user_channel(str(api_users.member.pk))))
    assert owners["job"]["state"] == "running" and "worker" not in owners["job"]
    assert owners == {**json.loads(text), "job": member_view(json.loads(text)["job"])}
    # The demo page: the owner's jobs, as the owner may see them.
    client.force_login(api_users.member)
    [shown] = client.get("/demo/jobs.json").json()["results"]
    assert shown["id"] == job.pk and shown["state"] == "running" and "worker" not in shown
    # And the events a real run stores reach the owner without it.
    run_until_idle()
    for row in JobEventRecord.objects.filter(job_id=job.pk):
        assert "worker" in json.loads(row.data)["job"]
        assert "worker" not in json.loads(member_text(row.data))["job"]


def test_queues_list_pause_and_resume(member, operator):
    noop.enqueue({"q": 1}, queue="mail")
    assert member.get("/api/jobs/queues/").status_code == 403
    assert member.post("/api/jobs/queues/mail/pause/", {}, format="json").status_code == 403
    assert member.post("/api/jobs/queues/mail/resume/", {}, format="json").status_code == 403
    assert not PausedQueue.objects.exists()

    paused = operator.post(
        "/api/jobs/queues/mail/pause/", {"reason": "SMTP down"}, format="json"
    ).json()
    assert paused["paused"] is True and paused["reason"] == "SMTP down"
    assert paused["paused_by"] == "operator"
    rows = {r["queue"]: r for r in operator.get("/api/jobs/queues/").json()}
    assert rows["mail"]["paused"] is True and rows["mail"]["reason"] == "SMTP down"
    assert rows["mail"]["states"] == {"queued": 1}

    # Enqueue is still accepted while paused.
    assert noop.enqueue({"q": 2}, queue="mail").state == "queued"

    resumed = operator.post("/api/jobs/queues/mail/resume/", {}, format="json").json()
    assert resumed == {"queue": "mail", "engine": "default", "paused": False, "resumed": True}
    rows = {r["queue"]: r for r in operator.get("/api/jobs/queues/").json()}
    assert rows["mail"]["paused"] is False and rows["mail"]["states"] == {"queued": 2}


def test_pause_refuses_unknown_fields_and_engines_with_a_400(operator):
    response = operator.post("/api/jobs/queues/mail/pause/", {"why": "x"}, format="json")
    assert response.status_code == 400 and "why" in response.json()["errors"]
    response = operator.post("/api/jobs/queues/mail/pause/", {"engine": "nope"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "UNKNOWN_ENGINE"
    response = operator.post("/api/jobs/queues/a%07b/pause/", {}, format="json")
    assert response.status_code == 400
    assert not PausedQueue.objects.exists()


def test_the_schema_documents_the_fleet_endpoints(api_client):
    paths = api_client().get("/api/jobs/schema/?format=json").json()["paths"]
    assert set(paths["/api/jobs/workers/"]) >= {"get"}
    assert set(paths["/api/jobs/queues/{name}/pause/"]) >= {"post"}
    job = paths["/api/jobs/{id}/"]["get"]["responses"]["200"]
    assert job
