"""The OpenAPI document says what the API answers (SPEC §7, "And: ..."; docs/security.md).

Every operation documents 429 (a throttle: the member's rate, or refused credentials, which
apply to every operation) with ``Retry-After``, and 405; a method a path does not serve is a
405 whatever the body (never the 415 of a body that is not JSON); cancel, retry and PATCH
bodies are required; an empty filter or a control character in one is a 400.
"""

from __future__ import annotations

import base64

import pytest
from django.test import Client

from django_jobs.models import Schedule
from django_jobs.registry import lookup

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
    assert len(found) == 17  # jobs, schedules, kinds, events, workers and queues
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


def test_a_method_a_path_does_not_serve_is_a_405_whatever_the_body(schema, api_users):
    job = lookup("demo.hello").as_user(api_users.member, "x")
    schedule = Schedule.objects.create(
        name="s", cron="0 3 * * *", tz="UTC", kind="api.report", owner=api_users.member
    )
    client = Client()
    for path, methods in schema["paths"].items():
        if path.endswith("/events/"):
            continue
        url = path.replace("{id}", str(schedule.pk if "schedules" in path else job.pk))
        for method in METHODS:
            if method in methods:
                continue
            for content_type in (
                "text/plain",
                "application/json",
                "application/x-www-form-urlencoded",
            ):
                answer = client.generic(
                    method.upper(), url, b"x=1", content_type=content_type, **OPERATOR
                )
                assert answer.status_code == 405, (method, url, content_type, answer.content)
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
