"""The OpenAPI schema describes what the API really answers.

The response serializers document the JSON that ``django_jobs.serialize`` and ``describe()``
build; the first tests hold them together. Then schemathesis sends generated requests (as a
member and as an operator) and checks every answer against the schema: no 5xx, documented
status codes, content types and bodies.
"""

from __future__ import annotations

import base64

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import checks
from schemathesis.generation import GenerationMode

from django_jobs.api import serializers as api_serializers
from django_jobs.kinds.registry import lookup
from django_jobs.models import Schedule
from django_jobs.observability.stats import queue_stats
from django_jobs.serialize import JobField, JsonType, job_detail_json, job_json
from django_jobs.testing import run_until_idle

SCHEMA_URL = "/api/jobs/schema/?format=json"


def _fields(serializer_class) -> set[str]:
    return set(serializer_class().fields)


def test_job_json_matches_the_documented_shape(api_users):
    job = lookup("api.steps").as_user(api_users.member, {"fail": False})
    run_until_idle()
    job.refresh_from_db()
    assert set(job_json(job)) == _fields(api_serializers.JobSerializer)
    assert set(job_json(job, deduped=False)) == _fields(api_serializers.SubmittedJobSerializer)
    detail = job_detail_json(job)
    assert set(detail) == _fields(api_serializers.JobDetailSerializer)
    assert set(detail["steps"][0]) == _fields(api_serializers.StepSerializer)
    progress = api_serializers.JobSerializer().fields["progress"]
    assert set(detail["progress"]) == set(progress.fields)


@pytest.mark.parametrize("json_type", [t for t in JsonType if t is not JsonType.OBJECT])
def test_every_json_type_of_the_job_json_has_its_schema_field(json_type):
    # The response serializers are made from serialize's field lists: a type added there
    # without a serializer field would break the schema only once a field used it.
    field = api_serializers.api_field(JobField("x", "x", json_type, null=True, help="h"))
    assert field.read_only and field.allow_null and field.help_text == "h"


def test_describe_and_stats_match_the_documented_shape(api_users):
    assert set(lookup("api.report").describe()) == _fields(api_serializers.KindSerializer)
    lookup("demo.hello").as_user(api_users.member, "shape")
    stats = queue_stats()
    assert set(stats) == _fields(api_serializers.StatsSerializer)
    assert set(stats["queues"][0]) == _fields(api_serializers.QueueStatsSerializer)
    assert set(stats["pickup_latency_ms"]) == _fields(api_serializers.LatencySerializer)


# --- schemathesis --------------------------------------------------------------------------


@pytest.fixture
def wsgi_app():
    """The project's WSGI app, serving requests on the test's own database connection."""
    # Django closes connections at the end of each request; inside a test transaction that
    # would end the test's transaction, so (like Django's test client) keep them open.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def api_schema(wsgi_app, api_users):
    # Rows for the generated requests to find: jobs in several states, a schedule.
    hello = lookup("demo.hello")
    for i in range(3):
        hello.as_user(api_users.member, f"seed-{i}")
    lookup("api.steps").as_user(api_users.member, {"fail": True})
    run_until_idle()
    Schedule.objects.create(
        name="seed", cron="0 3 * * *", tz="UTC", kind="api.report", owner=api_users.member
    )
    return schemathesis.openapi.from_wsgi(SCHEMA_URL, wsgi_app)


EXAMPLES = 12
bounded = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
]
# Not here: ``ignored_auth`` (it counts the generated session cookie as the credentials; the
# permission matrix asserts 401 for every action instead) and ``positive_data_acceptance``
# (a schema-valid payload can still fail the kind's own serializer, or name a kind that does
# not exist: 400 and 403 are the contract there).
OPERATIONS = {
    "GET /api/jobs/",
    "POST /api/jobs/",
    "GET /api/jobs/{id}/",
    "POST /api/jobs/{id}/cancel/",
    "POST /api/jobs/{id}/retry/",
    "GET /api/jobs/kinds/",
    "GET /api/jobs/stats/",
    "GET /api/jobs/schedules/",
    "POST /api/jobs/schedules/",
    "GET /api/jobs/schedules/{id}/",
    "PATCH /api/jobs/schedules/{id}/",
    "DELETE /api/jobs/schedules/{id}/",
}
CREDENTIALS = {
    "member": ("member", "pw-member"),
    "other": ("other", "pw-other"),
    "operator": ("operator", "pw-operator"),
}


def _basic(username: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("role", ["member", "operator"])
def test_schema_conformance(role, mode, api_schema):
    headers = _basic(*CREDENTIALS[role])
    operations = [
        result.ok()
        for result in api_schema.get_all_operations()
        # The event stream never ends: it is tested with its own client.
        if not result.ok().path.endswith("/events/")
    ]
    assert {op.label for op in operations} >= OPERATIONS

    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode, headers=headers))
        @bounded
        def check(case):
            case.call_and_validate(checks=CHECKS)

        try:
            check()
        except Unsatisfiable:
            # Nothing of this operation can be made invalid (no parameters, no body).
            assert mode == GenerationMode.NEGATIVE
            assert not (operation.body or operation.query or operation.path_parameters)


def test_real_answers_match_the_schema(api_schema, wsgi_app, api_users):
    """Requests that reach the happy paths (which generated data rarely does), checked too."""
    from werkzeug.test import Client

    raw = api_schema.raw_schema
    client = Client(wsgi_app)
    step_job = lookup("api.steps").as_user(api_users.member, {"fail": True})
    run_until_idle()

    def call(role, method, path, template, json=None, status=200):
        response = client.open(path, method=method, json=json, headers=_basic(*CREDENTIALS[role]))
        assert response.status_code == status, response.get_data(as_text=True)
        assert str(status) in raw["paths"][template][method.lower()]["responses"]
        api_schema[template][method].validate_response(response)
        return response.get_json()

    submitted = call(
        "member",
        "POST",
        "/api/jobs/",
        "/api/jobs/",
        {"kind": "demo.hello", "payload": "schema"},
        201,
    )
    call(
        "member",
        "POST",
        "/api/jobs/",
        "/api/jobs/",
        {"kind": "demo.hello", "payload": "schema"},
        200,
    )
    call("member", "POST", "/api/jobs/", "/api/jobs/", {"kind": "test.noop"}, 403)
    call("member", "POST", "/api/jobs/", "/api/jobs/", {"kind": "test.validated"}, 400)
    call("member", "GET", "/api/jobs/?page_size=2", "/api/jobs/")
    call("member", "GET", f"/api/jobs/{step_job.pk}/", "/api/jobs/{id}/")
    job_url = f"/api/jobs/{submitted['id']}"
    call("member", "POST", f"{job_url}/cancel/", "/api/jobs/{id}/cancel/", {})
    call("member", "POST", f"{job_url}/cancel/", "/api/jobs/{id}/cancel/", {}, 409)
    call("member", "POST", f"{job_url}/retry/", "/api/jobs/{id}/retry/", {})
    call(
        "operator",
        "POST",
        f"/api/jobs/{step_job.pk}/retry/",
        "/api/jobs/{id}/retry/",
        {"from_step": "store"},
    )
    call("member", "GET", "/api/jobs/kinds/", "/api/jobs/kinds/")
    call("operator", "GET", "/api/jobs/kinds/", "/api/jobs/kinds/")
    call("operator", "GET", "/api/jobs/stats/", "/api/jobs/stats/")
    call("member", "GET", "/api/jobs/stats/", "/api/jobs/stats/", status=403)
    schedule = call(
        "member",
        "POST",
        "/api/jobs/schedules/",
        "/api/jobs/schedules/",
        {
            "name": "s",
            "cron": "0 3 * * *",
            "tz": "UTC",
            "kind": "api.report",
            "payload": {"title": "t"},
        },
        201,
    )
    url, template = f"/api/jobs/schedules/{schedule['id']}/", "/api/jobs/schedules/{id}/"
    call("member", "GET", "/api/jobs/schedules/", "/api/jobs/schedules/")
    call("member", "GET", url, template)
    call("member", "PATCH", url, template, {"enabled": False})
    call("other", "GET", url, template, status=404)
    call("member", "DELETE", url, template, status=204)
