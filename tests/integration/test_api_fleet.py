"""The API's fleet endpoints: ``GET workers/``, ``GET queues/``, ``POST queues/{name}/pause/``
and ``resume/`` (operators only), and ``worker`` in a running job's JSON."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from django_jobs.engine import fleet
from django_jobs.engine.worker import make_worker_id
from django_jobs.models import PausedQueue
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
        fleet.register("box-1", queues=["mail"], concurrency=3, pid=77, hostname="host-a")
        job = noop.enqueue({"w": 1})
        claim(make_worker_id("default", "box-1"))
        assert api_client().get("/api/jobs/workers/").status_code == 401
        refused = member.get("/api/jobs/workers/")
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
    }
    assert row["version"]


def test_a_running_job_in_the_api_names_its_worker(member, api_users):
    job = report.enqueue({"title": "t", "rows": 1}, owner=api_users.member)
    assert member.get(f"/api/jobs/{job.pk}/").json()["worker"] is None
    claim(make_worker_id("default", "box-9"))
    assert member.get(f"/api/jobs/{job.pk}/").json()["worker"] == "box-9"
    [listed] = member.get("/api/jobs/").json()["results"]
    assert listed["worker"] == "box-9"


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
