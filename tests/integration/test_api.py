"""The REST API of SPEC §7, against the real database (PostgreSQL or SQLite)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from django_jobs import operations
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job, Schedule
from django_jobs.testing import run_until_idle

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def member(api_users, api_client):
    return api_client(api_users.member)


@pytest.fixture
def other(api_users, api_client):
    return api_client(api_users.other)


@pytest.fixture
def operator(api_users, api_client):
    return api_client(api_users.operator)


def submit(client, body, **extra):
    return client.post("/api/jobs/", body, format="json", **extra)


# --- submitting ----------------------------------------------------------------------------


def test_submit_creates_then_dedupes(member, api_users):
    first = submit(member, {"kind": "demo.render", "payload": {"video": "cat"}})
    assert first.status_code == 201
    job = first.json()
    assert job["kind"] == "demo.render"
    assert job["state"] == "queued"
    assert job["owner"] == api_users.member.pk
    assert job["deduped"] is False
    assert job["payload"] == {"video": "cat"}
    again = submit(member, {"kind": "demo.render", "payload": {"video": "cat"}})
    assert again.status_code == 200
    assert again.json()["id"] == job["id"]
    assert again.json()["deduped"] is True
    assert Job.objects.count() == 1


def test_idempotency_key_header_is_the_field(member):
    first = submit(member, {"kind": "demo.hello", "payload": "a"}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201
    assert first.json()["idempotency_key"] == "k-1"
    # Another payload, same key: the live job comes back.
    second = submit(member, {"kind": "demo.hello", "payload": "b", "idempotency_key": "k-1"})
    assert second.status_code == 200
    assert second.json()["id"] == first.json()["id"]
    third = submit(member, {"kind": "demo.hello", "payload": "c"}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert third.status_code == 200
    assert third.json()["deduped"] is True


def test_idempotency_header_and_field_must_agree(member):
    response = submit(
        member,
        {"kind": "demo.hello", "payload": "a", "idempotency_key": "one"},
        HTTP_IDEMPOTENCY_KEY="two",
    )
    assert response.status_code == 400
    assert "idempotency_key" in response.json()["errors"]


def test_keys_are_scoped_per_owner(member, other, api_users):
    mine = submit(member, {"kind": "demo.hello", "payload": "x"}, HTTP_IDEMPOTENCY_KEY="same")
    theirs = submit(other, {"kind": "demo.hello", "payload": "x"}, HTTP_IDEMPOTENCY_KEY="same")
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]
    assert theirs.json()["owner"] == api_users.other.pk


def test_unknown_and_forbidden_kinds_get_the_same_body(member, operator):
    unknown = submit(member, {"kind": "no.such.kind", "payload": {}})
    forbidden = submit(member, {"kind": "test.noop", "payload": {}})
    assert unknown.status_code == forbidden.status_code == 403
    assert unknown.content == forbidden.content
    assert unknown.json()["code"] == "KIND_NOT_ALLOWED"
    # An operator sees every kind: an unknown one is a 400 naming the known kinds (SPEC §7).
    refused = submit(operator, {"kind": "no.such.kind"})
    assert refused.status_code == 400 and refused.json()["code"] == "UNKNOWN_KIND"
    assert "demo.hello" in refused.json()["message"]
    assert Job.objects.count() == 0


def test_an_operator_submitting_an_unknown_kind_is_told_the_known_kinds(operator, member):
    """Operators see every kind (GET kinds/): nothing to hide, so the answer is the CLI's
    UNKNOWN_KIND, naming the kinds that exist. A member still gets the 403 of a forbidden kind."""
    from django_jobs.kinds.registry import all_handles

    response = submit(operator, {"kind": "demo.rendr", "payload": {}})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "UNKNOWN_KIND"
    assert "'demo.rendr'" in body["message"]
    for handle in all_handles():
        assert handle.kind in body["message"]
    assert body["errors"] == {"kind": [body["message"]]}
    assert submit(member, {"kind": "demo.rendr", "payload": {}}).status_code == 403
    assert Job.objects.count() == 0


@pytest.mark.parametrize("field", ["priority", "queue"])
def test_member_may_not_set_priority_or_queue(member, field):
    value = 3 if field == "priority" else "fast"
    response = submit(member, {"kind": "demo.hello", "payload": "x", field: value})
    assert response.status_code == 403
    assert response.json()["code"] == "OPERATOR_ONLY_FIELD"
    # Sending them as null is not setting them.
    assert submit(member, {"kind": "demo.hello", "payload": "x", field: None}).status_code == 201


def test_operator_sets_priority_and_queue(operator):
    response = submit(
        operator, {"kind": "test.noop", "payload": {"a": 1}, "priority": -3, "queue": "fast"}
    )
    assert response.status_code == 201
    assert response.json()["priority"] == -3
    assert response.json()["queue"] == "fast"


def test_invalid_payload_is_400_with_field_errors(member):
    response = submit(member, {"kind": "test.validated", "payload": {"order": 0}})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "INVALID_PAYLOAD"
    assert "order" in body["errors"]["payload"]
    assert "fix" in body["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"payload": {}}, "kind"),
        ({"kind": 5}, "kind"),
        ({"kind": "demo.hello", "run_at": "2026-03-02T10:00:00"}, "run_at"),
        ({"kind": "demo.hello", "run_at": "tomorrow"}, "run_at"),
        ({"kind": "demo.hello", "delay": "soon"}, "delay"),
        ({"kind": "demo.hello", "delay": -1}, "delay"),
        ({"kind": "demo.hello", "delay": 1e300}, "delay"),
        ({"kind": "demo.hello", "delay": True}, "delay"),
        ({"kind": "demo.hello", "delay": "5m", "run_at": "2026-03-02T10:00:00Z"}, "delay"),
        ({"kind": "demo.hello", "priority": 40000}, "priority"),
    ],
)
def test_bad_fields_are_400(operator, body, field):
    response = submit(operator, body)
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["code"] == "INVALID"
    assert field in data["errors"]


def test_run_at_and_delay(operator):
    with time_machine.travel(NOW, tick=False):
        at = submit(
            operator, {"kind": "test.noop", "payload": 1, "run_at": "2026-03-02T11:30:00+01:00"}
        )
        later = submit(operator, {"kind": "test.noop", "payload": 2, "delay": "5m"})
        seconds = submit(operator, {"kind": "test.noop", "payload": 3, "delay": 90})
    assert at.status_code == later.status_code == seconds.status_code == 201
    assert datetime.fromisoformat(at.json()["run_at"]) == datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
    assert datetime.fromisoformat(later.json()["run_at"]) == NOW + timedelta(minutes=5)
    assert datetime.fromisoformat(seconds.json()["run_at"]) == NOW + timedelta(seconds=90)


def test_oversized_body_is_413_before_parsing(member, settings):
    settings.JOBS = {**settings.JOBS, "MAX_PAYLOAD_BYTES": 1000}
    body = b'{"kind": "demo.hello", "payload": "' + b"x" * 40_000 + b'"'  # not even JSON
    response = member.post("/api/jobs/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "BODY_TOO_LARGE"
    assert "MAX_PAYLOAD_BYTES" in response.json()["message"]


def test_oversized_payload_is_413(member, settings):
    settings.JOBS = {**settings.JOBS, "MAX_PAYLOAD_BYTES": 1000}
    response = submit(member, {"kind": "demo.hello", "payload": "x" * 2000})
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert Job.objects.count() == 0


def test_the_api_and_admission_measure_a_payload_alike(member, settings):
    """One check (``validation.storable_payload``): the stored JSON in UTF-8 bytes, so a
    payload admission takes is never a 413, and the refusal is admission's own message."""
    from django_jobs import InvalidPayload
    from django_jobs.kinds.registry import lookup

    settings.JOBS = {**settings.JOBS, "MAX_PAYLOAD_BYTES": 1000}
    fits = {"name": "é" * 490}  # 991 bytes stored; 2,951 once ASCII-escaped
    assert submit(member, {"kind": "demo.hello", "payload": fits}).status_code == 201
    over = {"name": "é" * 500}  # 1,011 bytes stored
    response = submit(member, {"kind": "demo.hello", "payload": over})
    assert response.status_code == 413
    with pytest.raises(InvalidPayload) as refused:
        lookup("demo.hello").enqueue(over)
    assert response.json() == {"code": "PAYLOAD_TOO_LARGE", "message": refused.value.message}
    schedule = {**SCHEDULE, "payload": {"title": "é" * 600}}
    response = member.post("/api/jobs/schedules/", schedule, format="json")
    assert response.status_code == 413 and response.json()["code"] == "PAYLOAD_TOO_LARGE"


def test_body_must_be_json(member):
    broken = member.post("/api/jobs/", b"{nope", content_type="application/json")
    assert broken.status_code == 400
    assert broken.json()["code"] == "MALFORMED_BODY"
    form = member.post("/api/jobs/", {"kind": "demo.hello"})  # multipart
    assert form.status_code == 415
    assert form.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"
    listed = member.post("/api/jobs/", [1, 2], format="json")
    assert listed.status_code == 400


def test_submit_uses_tenant_of(member, settings):
    settings.JOBS = {**settings.JOBS, "TENANT_OF": lambda user: f"t-{user.username}"}
    response = submit(member, {"kind": "demo.hello", "payload": "t"})
    assert response.json()["tenant"] == "t-member"


# --- reading -------------------------------------------------------------------------------


def test_members_see_only_their_own_jobs(member, other, operator, api_users):
    hello = lookup("demo.hello")
    mine = [hello.as_user(api_users.member, f"m{i}") for i in range(3)]
    theirs = hello.as_user(api_users.other, "o")
    listing = member.get("/api/jobs/").json()
    assert listing["count"] == 3
    assert [j["id"] for j in listing["results"]] == [j.pk for j in reversed(mine)]  # newest first
    assert set(listing) == {"count", "next", "previous", "results"}
    assert member.get(f"/api/jobs/{theirs.pk}/").status_code == 404
    assert member.post(f"/api/jobs/{theirs.pk}/cancel/", {}, format="json").status_code == 404
    assert member.get("/api/jobs/", {"kind": "demo.hello"}).json()["count"] == 3
    assert member.get("/api/jobs/stats/").status_code == 403
    assert other.get("/api/jobs/").json()["count"] == 1
    assert operator.get("/api/jobs/").json()["count"] == 4
    # The 404 for another member's job is the 404 of a job that does not exist.
    missing = member.get("/api/jobs/999999/")
    assert missing.status_code == 404
    assert missing.content == member.get(f"/api/jobs/{theirs.pk}/").content


def test_list_filters_and_pages(operator, api_users):
    hello, noop = lookup("demo.hello"), lookup("test.noop")
    for i in range(3):
        hello.as_user(api_users.member, f"h{i}")
    noop.enqueue({"n": 1}, queue="slow")
    cancelled = hello.as_user(api_users.member, "gone")
    operations.cancel(cancelled.pk)
    assert operator.get("/api/jobs/", {"kind": "test.noop"}).json()["count"] == 1
    assert operator.get("/api/jobs/", {"queue": "slow"}).json()["count"] == 1
    assert operator.get("/api/jobs/", {"state": "cancelled"}).json()["count"] == 1
    assert operator.get("/api/jobs/", {"state": "queued"}).json()["count"] == 4
    bad = operator.get("/api/jobs/", {"state": "done"})
    assert bad.status_code == 400
    assert "state" in bad.json()["errors"]
    page = operator.get("/api/jobs/", {"page_size": 2}).json()
    assert page["count"] == 5
    assert len(page["results"]) == 2
    assert page["next"] and page["previous"] is None
    assert operator.get("/api/jobs/", {"page": 9}).status_code == 404


def test_detail_has_steps_and_log(operator, api_users):
    job = lookup("api.steps").as_user(api_users.member, {"fail": False})
    run_until_idle()
    response = operator.get(f"/api/jobs/{job.pk}/")
    assert response.status_code == 200
    data = response.json()
    assert data["state"] == "succeeded"
    assert data["result"] == {"stored": True}
    assert data["log"] == ["fetching"]
    assert [s["name"] for s in data["steps"]] == ["fetch", "store"]
    assert set(data["steps"][0]) == {"name", "state", "attempts", "started_at", "ended_at", "error"}
    assert data["steps"][0]["state"] == "completed"


def test_owners_see_the_error_and_operators_the_traceback(member, operator, api_users):
    job = lookup("api.steps").as_user(api_users.member, {"fail": True})
    run_until_idle()
    mine = member.get(f"/api/jobs/{job.pk}/").json()
    assert mine["state"] == "failed" and "RuntimeError: store refused" in mine["error"]
    assert "Traceback" not in mine["error"] and 'File "' not in mine["error"]
    [listed] = member.get("/api/jobs/").json()["results"]
    assert listed["error"] == mine["error"]
    full = operator.get(f"/api/jobs/{job.pk}/").json()
    assert "Traceback (most recent call last)" in full["error"]


def test_the_demo_page_shows_members_no_traceback(api_users, client):
    owned = {
        user: lookup("api.steps").as_user(user, {"fail": True, "by": user.username})
        for user in (api_users.member, api_users.operator)
    }
    run_until_idle()
    for user, job in owned.items():
        client.force_login(user)
        [shown] = client.get("/demo/jobs.json").json()["results"]
        assert shown["id"] == job.pk and "RuntimeError: store refused" in shown["error"]
        has_traceback = "Traceback (most recent call last)" in shown["error"]
        assert has_traceback is (user == api_users.operator), user.username


def test_kinds_for_members_and_operators(member, operator):
    member_kinds = {row["kind"] for row in member.get("/api/jobs/kinds/").json()}
    operator_kinds = {row["kind"] for row in operator.get("/api/jobs/kinds/").json()}
    assert {"demo.render", "demo.hello", "test.validated", "api.report"} <= member_kinds
    assert "test.noop" not in member_kinds
    assert all(row["member_safe"] for row in member.get("/api/jobs/kinds/").json())
    assert {"test.noop", "test.fail"} <= operator_kinds
    report = next(r for r in operator.get("/api/jobs/kinds/").json() if r["kind"] == "api.report")
    assert report["schedulable"] is True
    assert report["input"]["required"] == ["title"]


def test_stats_for_operators(operator, api_users):
    lookup("demo.hello").as_user(api_users.member, "s")
    data = operator.get("/api/jobs/stats/").json()
    assert data["queues"][0]["queue"] == "default"
    assert data["queues"][0]["states"] == {"queued": 1}
    assert set(data["pickup_latency_ms"]) == {"p50", "p95", "p99", "sample"}


def test_non_numeric_id_is_a_json_404(member):
    response = member.get("/api/jobs/abc/")
    assert response.status_code == 404
    assert response.json()["code"] == "NOT_FOUND"


# --- cancel and retry ----------------------------------------------------------------------


def test_cancel_then_409(member, api_users):
    job = lookup("demo.hello").as_user(api_users.member, "c")
    response = member.post(f"/api/jobs/{job.pk}/cancel/", {}, format="json")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    again = member.post(f"/api/jobs/{job.pk}/cancel/", {}, format="json")
    assert again.status_code == 409
    assert again.json()["code"] == "NOT_CANCELLABLE"


def test_retry_states(member, api_users):
    job = lookup("demo.hello").as_user(api_users.member, "r")
    queued = member.post(f"/api/jobs/{job.pk}/retry/", {}, format="json")
    assert queued.status_code == 409
    assert queued.json()["code"] == "NOT_RETRYABLE"
    operations.cancel(job.pk)
    retried = member.post(f"/api/jobs/{job.pk}/retry/", {}, format="json")
    assert retried.status_code == 200
    assert retried.json()["state"] == "queued"


def test_unknown_job_is_not_retried_blindly(operator, api_users):
    job = lookup("test.noop").enqueue({"u": 1})
    Job.objects.filter(pk=job.pk).update(state="unknown", error="maybe charged")
    response = operator.post(f"/api/jobs/{job.pk}/retry/", {}, format="json")
    assert response.status_code == 409
    assert "Resolve" in response.json()["message"]


def test_retry_from_step(operator, api_users):
    job = lookup("api.steps").enqueue({"fail": True})
    run_until_idle()
    assert Job.objects.get(pk=job.pk).state == "failed"
    bad = operator.post(f"/api/jobs/{job.pk}/retry/", {"from_step": "nope"}, format="json")
    assert bad.status_code == 400
    assert "from_step" in bad.json()["errors"]
    response = operator.post(f"/api/jobs/{job.pk}/retry/", {"from_step": "store"}, format="json")
    assert response.status_code == 200
    names = list(Job.objects.get(pk=job.pk).steps.values_list("name", flat=True))
    assert names == ["fetch"]


# --- schedules -----------------------------------------------------------------------------

SCHEDULE = {
    "name": "morning-report",
    "cron": "30 7 * * *",
    "tz": "Europe/Paris",
    "kind": "api.report",
    "payload": {"title": "daily"},
}


def test_member_schedules_a_schedulable_member_safe_kind(member, other, api_users):
    with time_machine.travel(NOW, tick=False):
        response = member.post("/api/jobs/schedules/", SCHEDULE, format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["owner"] == api_users.member.pk
    assert data["catch_up"] == "skip"
    assert data["enabled"] is True
    # 07:30 in Paris (UTC+1 in March before DST) is 06:30 UTC, the day after NOW (09:00 UTC).
    assert datetime.fromisoformat(data["next_run_at"]) == datetime(2026, 3, 3, 6, 30, tzinfo=UTC)
    assert other.get(f"/api/jobs/schedules/{data['id']}/").status_code == 404
    assert other.get("/api/jobs/schedules/").json()["count"] == 0
    assert member.get("/api/jobs/schedules/").json()["count"] == 1


def test_member_may_not_schedule_other_kinds(member):
    not_schedulable = member.post(
        "/api/jobs/schedules/", {**SCHEDULE, "kind": "demo.hello"}, format="json"
    )
    operator_only = member.post(
        "/api/jobs/schedules/", {**SCHEDULE, "kind": "test.noop"}, format="json"
    )
    unknown = member.post("/api/jobs/schedules/", {**SCHEDULE, "kind": "nope"}, format="json")
    assert not_schedulable.status_code == operator_only.status_code == unknown.status_code == 403
    assert not_schedulable.content == operator_only.content == unknown.content
    assert Schedule.objects.count() == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "cron"),
        ({"tz": "Bogota"}, "tz"),
        ({"tz": ""}, "tz"),
        ({"catch_up": "sometimes"}, "catch_up"),
        ({"payload": {"title": ""}}, "payload"),
        ({"name": ""}, "name"),
    ],
)
def test_schedule_validation(member, change, field):
    response = member.post("/api/jobs/schedules/", {**SCHEDULE, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    if field == "tz" and change["tz"]:
        assert "America/Bogota" in json.dumps(response.json())


def test_schedule_names_are_unique_per_owner(member, other):
    assert member.post("/api/jobs/schedules/", SCHEDULE, format="json").status_code == 201
    # Another member's names are not probed through a refusal: the same name is theirs too.
    assert other.post("/api/jobs/schedules/", SCHEDULE, format="json").status_code == 201
    taken = member.post("/api/jobs/schedules/", SCHEDULE, format="json")
    assert taken.status_code == 400
    assert "name" in taken.json()["errors"]


def test_patch_pause_and_delete(member, api_users):
    with time_machine.travel(NOW, tick=False):
        created = member.post("/api/jobs/schedules/", SCHEDULE, format="json").json()
        url = f"/api/jobs/schedules/{created['id']}/"
        paused = member.patch(url, {"enabled": False}, format="json")
        assert paused.status_code == 200
        assert paused.json()["next_run_at"] is None
        moved = member.patch(
            url, {"enabled": True, "cron": "0 12 * * *", "tz": "UTC"}, format="json"
        )
        assert moved.status_code == 200
        assert datetime.fromisoformat(moved.json()["next_run_at"]) == datetime(
            2026, 3, 2, 12, 0, tzinfo=UTC
        )
    to_other_kind = member.patch(url, {"kind": "demo.hello"}, format="json")
    assert to_other_kind.status_code == 403
    bad_payload = member.patch(url, {"payload": {"nope": 1}}, format="json")
    assert bad_payload.status_code == 400
    assert member.put(url, SCHEDULE, format="json").status_code == 405
    assert member.delete(url).status_code == 204
    assert not Schedule.objects.exists()


def test_member_may_pause_a_schedule_whose_kind_is_no_longer_allowed(member, api_users):
    schedule = Schedule.objects.create(
        name="legacy", cron="0 3 * * *", tz="UTC", kind="test.noop", owner=api_users.member
    )
    url = f"/api/jobs/schedules/{schedule.pk}/"
    assert member.patch(url, {"enabled": False}, format="json").status_code == 200
    assert member.patch(url, {"enabled": True}, format="json").status_code == 403


def test_operator_schedules_any_kind(operator, api_users):
    response = operator.post(
        "/api/jobs/schedules/", {**SCHEDULE, "kind": "test.noop", "payload": {}}, format="json"
    )
    assert response.status_code == 201
    Schedule.objects.create(
        name="m", cron="0 3 * * *", tz="UTC", kind="api.report", owner=api_users.member
    )
    assert operator.get("/api/jobs/schedules/").json()["count"] == 2


# --- errors, authentication, deny by default -----------------------------------------------


def test_anonymous_is_401_with_a_challenge(api_client):
    response = api_client().get("/api/jobs/")
    assert response.status_code == 401
    assert response.json()["code"] == "NOT_AUTHENTICATED"
    # Not Basic: a browser would prompt, then cache the credentials (docs/security.md).
    assert response.headers["WWW-Authenticate"] == 'Session realm="api"'


def test_basic_auth(api_users, api_client):
    client = api_client()
    client.credentials(HTTP_AUTHORIZATION="Basic " + _basic("member", "pw-member"))
    assert client.get("/api/jobs/").status_code == 200
    client.credentials(HTTP_AUTHORIZATION="Basic " + _basic("member", "wrong"))
    refused = client.get("/api/jobs/")
    assert refused.status_code == 401
    assert refused.json()["code"] == "AUTHENTICATION_FAILED"


def _basic(username: str, password: str) -> str:
    import base64

    return base64.b64encode(f"{username}:{password}".encode()).decode()


def test_session_only_views_still_answer_401(api_users):
    # DRF asks only the first authenticator for a challenge; SessionAuthentication has none.
    from rest_framework.authentication import SessionAuthentication
    from rest_framework.test import APIRequestFactory

    from django_jobs.api.views import FALLBACK_CHALLENGE, JobViewSet

    view = JobViewSet.as_view({"get": "list"}, authentication_classes=[SessionAuthentication])
    response = view(APIRequestFactory().get("/api/jobs/"))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == FALLBACK_CHALLENGE


def test_session_writes_need_csrf(api_users):
    from rest_framework.test import APIClient

    client = APIClient(enforce_csrf_checks=True)
    client.force_login(api_users.member)
    response = client.post("/api/jobs/", {"kind": "demo.hello"}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "CSRF_FAILED"
    assert "X-CSRFToken" in response.json()["message"]


def test_unmapped_method_is_405(member):
    response = member.delete("/api/jobs/")
    assert response.status_code == 405
    assert response.json()["code"] == "METHOD_NOT_ALLOWED"


def test_every_routed_action_declares_its_permissions():
    from django_jobs import urls

    for pattern in urls.urlpatterns:
        view = pattern.callback
        actions = getattr(view, "actions", None)
        if actions is None:
            continue
        declared = view.cls.action_permissions
        for action_name in actions.values():
            assert action_name in declared, f"{view.cls.__name__}.{action_name} has no rules"


def test_an_action_without_rules_is_denied(api_users):
    from rest_framework.test import APIRequestFactory

    from django_jobs.api.permissions import DenyAll, IsSignedIn
    from django_jobs.api.views import JobViewSet

    request = APIRequestFactory().get("/api/jobs/")
    view = JobViewSet()
    view.request, view.action = request, "something_new"
    assert [type(p) for p in view.get_permissions()] == [IsSignedIn, DenyAll]


def test_schema_is_public(api_client):
    response = api_client().get("/api/jobs/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert "/api/jobs/{id}/retry/" in schema["paths"]
    assert "/api/jobs/schema/" not in schema["paths"]


def test_an_api_schedule_fires_for_its_owner(member, api_users):
    from django_jobs.testing import fire_schedules

    body = {**SCHEDULE, "cron": "*/5 * * * *", "tz": "UTC", "catch_up": "run-once"}
    with time_machine.travel(NOW, tick=False):
        created = member.post("/api/jobs/schedules/", body, format="json").json()
        assert fire_schedules() == []  # nothing from before it was added
    with time_machine.travel(NOW + timedelta(minutes=5, seconds=10), tick=False):
        fired = fire_schedules()
    assert [(j.kind, j.owner_id, j.payload) for j in fired] == [
        ("api.report", api_users.member.pk, {"title": "daily"})
    ]
    assert fired[0].idempotency_key == "schedule:morning-report:2026-03-02T09:05:00+00:00"
    # Paused for an hour, then resumed: the paused hour is not caught up.
    url = f"/api/jobs/schedules/{created['id']}/"
    with time_machine.travel(NOW + timedelta(minutes=6), tick=False):
        member.patch(url, {"enabled": False}, format="json")
    with time_machine.travel(NOW + timedelta(hours=1, minutes=6), tick=False):
        member.patch(url, {"enabled": True}, format="json")
        assert fire_schedules() == []
    with time_machine.travel(NOW + timedelta(hours=1, minutes=10, seconds=5), tick=False):
        assert len(fire_schedules()) == 1
