"""Who may do what over the API: one cell per (role, action), with the exact status."""

from __future__ import annotations

from typing import Any

import pytest

from django_jobs import operations
from django_jobs.kinds.registry import lookup
from django_jobs.models import Schedule

ROLES = ("anonymous", "member", "other", "operator", "superuser")

# action: statuses for (anonymous, member, other member, operator, superuser). The job and the
# schedule acted on belong to "member"; "other" is another member.
MATRIX: dict[str, tuple[int, int, int, int, int]] = {
    "list": (401, 200, 200, 200, 200),
    "detail": (401, 200, 404, 200, 200),
    "submit member-safe": (401, 201, 201, 201, 201),
    "submit operator-only": (401, 403, 403, 201, 201),
    "submit unknown": (401, 403, 403, 400, 400),  # operators see every kind: nothing to probe
    "submit with priority": (401, 403, 403, 201, 201),
    "submit with queue": (401, 403, 403, 201, 201),
    "cancel": (401, 200, 404, 200, 200),
    "retry": (401, 200, 404, 200, 200),
    "retry operator-only kind": (401, 403, 404, 200, 200),
    "stats": (401, 403, 403, 200, 200),
    "kinds": (401, 200, 200, 200, 200),
    "schedules": (401, 200, 200, 200, 200),
    "schedule detail": (401, 200, 404, 200, 200),
    "schedule add member-safe": (401, 201, 201, 201, 201),
    "schedule add operator-only": (401, 403, 403, 201, 201),
    "schedule pause": (401, 200, 404, 200, 200),
    "schedule delete": (401, 204, 404, 204, 204),
}

CASES = [
    pytest.param(role, action, statuses[i], id=f"{role}-{action.replace(' ', '_')}")
    for action, statuses in MATRIX.items()
    for i, role in enumerate(ROLES)
]


def _request(client: Any, action: str, member: Any) -> Any:
    """Perform ``action`` against objects owned by ``member``; return the response."""
    hello = lookup("demo.hello")
    if action in ("detail", "cancel"):
        job = hello.as_user(member, "matrix")
        if action == "detail":
            return client.get(f"/api/jobs/{job.pk}/", format="json")
        return client.post(f"/api/jobs/{job.pk}/cancel/", {}, format="json")
    if action == "retry":
        job = hello.as_user(member, "matrix")
        operations.cancel(job.pk)
        return client.post(f"/api/jobs/{job.pk}/retry/", {}, format="json")
    if action == "retry operator-only kind":
        job = lookup("test.fail").as_user(member, {"n": 1})
        operations.cancel(job.pk)
        return client.post(f"/api/jobs/{job.pk}/retry/", {}, format="json")
    submits = {
        "submit member-safe": {"kind": "demo.hello", "payload": "you"},
        "submit operator-only": {"kind": "test.noop", "payload": {"n": 1}},
        "submit unknown": {"kind": "no.such.kind", "payload": {}},
        "submit with priority": {"kind": "demo.hello", "payload": "p", "priority": -5},
        "submit with queue": {"kind": "demo.hello", "payload": "q", "queue": "urgent"},
    }
    if action in submits:
        return client.post("/api/jobs/", submits[action], format="json")
    gets = {
        "list": "/api/jobs/",
        "stats": "/api/jobs/stats/",
        "kinds": "/api/jobs/kinds/",
        "schedules": "/api/jobs/schedules/",
    }
    if action in gets:
        return client.get(gets[action])
    schedule = Schedule.objects.create(
        name="member-report",
        cron="0 3 * * *",
        tz="Europe/Paris",
        kind="api.report",
        payload={"title": "daily"},
        owner=member,
    )
    if action == "schedule detail":
        return client.get(f"/api/jobs/schedules/{schedule.pk}/")
    if action == "schedule pause":
        return client.patch(
            f"/api/jobs/schedules/{schedule.pk}/", {"enabled": False}, format="json"
        )
    if action == "schedule delete":
        return client.delete(f"/api/jobs/schedules/{schedule.pk}/")
    kind = "api.report" if action == "schedule add member-safe" else "test.noop"
    body = {
        "name": "new-one",
        "cron": "*/5 * * * *",
        "tz": "UTC",
        "kind": kind,
        "payload": {"title": "x"},
    }
    return client.post("/api/jobs/schedules/", body, format="json")


@pytest.mark.parametrize(("role", "action", "expected"), CASES)
def test_permission_matrix(role, action, expected, api_users, api_client):
    user = None if role == "anonymous" else getattr(api_users, role)
    response = _request(api_client(user), action, api_users.member)
    assert response.status_code == expected, response.content
    if expected >= 400:
        body = response.json()
        assert set(body) >= {"code", "message"}, body
    if expected == 401:
        assert response.headers.get("WWW-Authenticate"), "a 401 names how to authenticate"
