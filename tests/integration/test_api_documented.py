"""The OpenAPI document says what the API answers (SPEC §7, "And: ..."; docs/security.md).

Every operation documents 429 (a throttle: the member's rate, or refused credentials, which
apply to every operation) with ``Retry-After``, and 405; a method a path does not serve is a
405 whatever the body and whoever asks (never the 415 of a body that is not JSON, nor the 401
or the CSRF refusal of a request that could never be served); cancel, retry and PATCH
bodies are required; an empty filter or a control character in one is a 400.
"""

from __future__ import annotations

import base64
import re

import pytest
from django.test import Client

from django_jobs.engine import schedules
from django_jobs.kinds.registry import lookup
from django_jobs.models import Schedule

METHODS = ("get", "post", "put", "patch", "delete")


def basic(username: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


OPERATOR = basic("operator", "pw-operator")


@pytest.fixture
def schema(api_users):
    answer = Client().get("/api/jobs/schema/", {"format": "json"})
    assert answer.status_code == 200
    return answer.json()


def operations(schema):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            if method in METHODS:
                yield path, method, operation


def test_every_operation_documents_429_and_405(schema):
    found = list(operations(schema))
    assert len(found) == 18  # jobs, schedules, kinds, stats, charts, events, workers and queues
    for path, method, operation in found:
        responses = operation["responses"]
        assert "429" in responses and "405" in responses, (method, path)
        assert "Retry-After" in responses["429"]["headers"]
    required = {
        operation["operationId"]: operation.get("requestBody", {}).get("required")
        for _path, _method, operation in found
    }
    assert required["jobs_cancel"] is required["jobs_retry"] is True
    assert required["schedules_update"] is required["jobs_submit"] is True
    assert required["queues_pause"] is required["queues_resume"] is True


def test_pause_and_resume_need_a_json_body_as_the_schema_says(api_users):
    # A body is required ({} will do), as for every write: a bodyless POST is what a
    # cross-site form or a beacon sends.
    for action in ("pause", "resume"):
        url = f"/api/jobs/queues/mail/{action}/"
        bodyless = Client().post(url, **OPERATOR)
        assert bodyless.status_code == 415, bodyless.content
        assert "JSON" in bodyless.json()["message"]
        answer = Client().post(url, b"{}", content_type="application/json", **OPERATOR)
        assert answer.status_code == 200, answer.content
    # The body is closed, as the schema says: an unknown field is a 400 naming it.
    answer = Client().post(
        "/api/jobs/queues/mail/pause/", b'{"why": 1}', content_type="application/json", **OPERATOR
    )
    assert answer.status_code == 400 and "why" in answer.json()["errors"]


def test_the_schema_states_what_the_serializers_refuse(schema, api_users):
    components = schema["components"]["schemas"]
    for name in ("PauseRequest", "ResumeRequest"):
        assert components[name]["additionalProperties"] is False
    # A schedule's tz: the zones the schedule service knows, and nothing else.
    zones = components["ScheduleRequest"]["properties"]["tz"]["enum"]
    assert components["PatchedScheduleRequest"]["properties"]["tz"]["enum"] == zones
    assert "Europe/Paris" in zones and "UTC" in zones and "0" not in zones
    for zone in zones:
        assert schedules.check_tz(zone) == zone
    body = {"name": "s", "cron": "0 3 * * *", "tz": "0", "kind": "api.report"}
    answer = Client().post(
        "/api/jobs/schedules/", body, content_type="application/json", **OPERATOR
    )
    assert answer.status_code == 400 and "tz" in answer.json()["errors"]
    # A submit: run_at or delay, not both.
    assert components["SubmitRequest"]["not"] == {"required": ["run_at", "delay"]}
    both = {"kind": "demo.hello", "payload": "x", "run_at": "2030-01-01T00:00:00Z", "delay": 5}
    answer = Client().post("/api/jobs/", both, content_type="application/json", **OPERATOR)
    assert answer.status_code == 400 and "not both" in answer.json()["errors"]["delay"][0]
    # The list's label filters: not empty, no control character; a queue's name alike.
    parameters = {
        p["name"]: p["schema"] for p in schema["paths"]["/api/jobs/"]["get"]["parameters"]
    }
    pause = schema["paths"]["/api/jobs/queues/{name}/pause/"]["post"]["parameters"]
    for stated in (parameters["kind"], parameters["queue"], pause[0]["schema"]):
        assert stated["minLength"] == 1
        assert re.search(stated["pattern"], "a queue")
        assert not re.search(stated["pattern"], "a\x1bb") and not re.search(stated["pattern"], "")
    for blank in (" ", "  \t"):  # trimmed by the filter: empty
        assert not re.search(parameters["kind"]["pattern"], blank)
    answer = Client().get("/api/jobs/?kind=+", **OPERATOR)
    assert answer.status_code == 400 and "kind" in answer.json()["errors"]
    answer = Client().post(
        "/api/jobs/queues/a%1Bb/pause/", b"{}", content_type="application/json", **OPERATOR
    )
    assert answer.status_code == 400 and "queue name" in answer.json()["message"]


def signed_in_by_session(user, *, token: bool) -> Client:
    """A browser's client signed in as ``user``, with CSRF checked as in production: holding
    the CSRF cookie, and sending its token in the header when ``token``."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/api/jobs/schema/")  # any page: the cookie is set on the first unsafe check
    secret = "a" * 32
    client.cookies["csrftoken"] = secret
    if token:
        client.defaults["HTTP_X_CSRFTOKEN"] = secret
    return client


def callers(api_users):
    """Every way to call: anonymous, Basic (operator and member), and a session (operator)
    with and without its CSRF token."""
    yield "anonymous", Client()
    yield "basic operator", Client(**OPERATOR)
    yield "basic member", Client(**basic("member", "pw-member"))
    yield "session with token", signed_in_by_session(api_users.operator, token=True)
    yield "session without token", signed_in_by_session(api_users.operator, token=False)


def test_a_method_a_path_does_not_serve_is_a_405_whatever_the_body(schema, api_users):
    # Whoever asks and whatever the body: the method is refused before credentials, CSRF or
    # the body are read (a session's CSRF check would parse the body, and refuse text with 415).
    job = lookup("demo.hello").as_user(api_users.member, "x")
    schedule = Schedule.objects.create(
        name="s", cron="0 3 * * *", tz="UTC", kind="api.report", owner=api_users.member
    )
    for who, client in callers(api_users):
        for path, methods in schema["paths"].items():
            if path.endswith("/events/"):
                continue
            url = path.replace("{id}", str(schedule.pk if "schedules" in path else job.pk))
            for method in METHODS:
                if method in methods:
                    continue
                for content_type, body in (
                    ("text/plain", b"x=1"),
                    ("application/json", b"{not json"),
                    ("application/json", b""),
                    ("application/x-www-form-urlencoded", b"x=1"),
                    ("", b""),
                ):
                    answer = client.generic(method.upper(), url, body, content_type=content_type)
                    where = (who, method, url, content_type, answer.content)
                    assert answer.status_code == 405, where
                    assert answer.json()["code"] == "METHOD_NOT_ALLOWED"
                    assert method.upper() not in answer["Allow"]


@pytest.mark.parametrize(
    "query",
    ["state=", "kind=", "queue=", "kind=a%00b", "queue=a%01b", "kind=%1b[31m", "state=%00"],
)
def test_an_empty_filter_or_a_control_character_in_one_is_a_400(api_users, query):
    answer = Client().get(f"/api/jobs/?{query}", **OPERATOR)
    assert answer.status_code == 400, (query, answer.content)
    name = query.split("=")[0]
    assert name in answer.json()["errors"]


def test_filters_still_filter(api_users):
    lookup("demo.hello").as_user(api_users.member, "x")
    answer = Client().get("/api/jobs/?state=queued&kind=demo.hello&queue=default", **OPERATOR)
    assert answer.status_code == 200 and answer.json()["count"] == 1
