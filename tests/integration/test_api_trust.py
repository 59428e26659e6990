"""What the API refuses to trust (SPEC §7, "Also: ..."; docs/security.md).

Pages beyond any table are 404s, never 500s; no Basic challenge and JSON-only writes, so a
cross-site form cannot spend a browser's cached credentials; a member's past ``run_at`` is
now; members are throttled (submits and schedule creations, open streams), and so are refused
credentials; the schema is built once; small refusals are the API's JSON. The clock is moved
(time_machine), never slept on.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import AsyncRequestFactory, Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import operations
from django_jobs.api.views import JobsSchemaGenerator, SchemaView
from django_jobs.events import quota
from django_jobs.events.sse import events
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job, Schedule, Throttle
from django_jobs.observability.stats import queue_stats
from tests.conftest import claim, session_cookie, wait_until

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SCHEDULE = {
    "name": "nightly",
    "cron": "0 3 * * *",
    "tz": "UTC",
    "kind": "api.report",
    "payload": {"title": "t"},
}


def basic(username: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


MEMBER = basic("member", "pw-member")
OPERATOR = basic("operator", "pw-operator")


@pytest.fixture
def client(api_users):
    """A client with no session: credentials go in each request, as a script sends them."""
    return Client()


# --- 1. pages beyond what exists ------------------------------------------------------------


def test_a_page_beyond_any_table_is_a_json_404_on_every_paginated_list(client, api_users):
    job = lookup("demo.hello").as_user(api_users.member, "p")
    for path in ("/api/jobs/", "/api/jobs/schedules/", f"/api/jobs/{job.pk}/children/"):
        for page in ("9223372036854775808", "9223372036854775807", "1" + "0" * 5000, "3"):
            response = client.get(path, {"page": page}, **MEMBER)
            assert response.status_code == 404, (path, page[:30], response.content[:200])
            assert response.json()["code"] == "PAGE_NOT_FOUND"
        assert client.get(path, {"page": "1", "page_size": "9" * 40}, **MEMBER).status_code == 400


#: Whole numbers of every magnitude up to 80 digits, as text.
NUMBERS = st.integers(min_value=0, max_value=80).flatmap(
    lambda digits: st.integers(min_value=10**digits, max_value=10 ** (digits + 1)).map(str)
)


@given(
    page=st.one_of(
        NUMBERS,
        st.integers(min_value=-(2**70), max_value=0).map(str),
        st.text(alphabet="0123456789", min_size=1, max_size=5000),
        st.text(max_size=30),
        st.just("last"),
    ),
    page_size=st.one_of(
        st.none(),
        NUMBERS,
        st.integers(min_value=-(2**70), max_value=0).map(str),
        st.text(alphabet="0123456789", min_size=1, max_size=5000),
        st.text(max_size=10),
    ),
)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_page_and_page_size_is_an_answer_never_a_500(api_users, page, page_size):
    client = Client()
    query = {"page": page} if page_size is None else {"page": page, "page_size": page_size}
    for path in ("/api/jobs/", "/api/jobs/schedules/"):
        response = client.get(path, query, **MEMBER)
        assert response.status_code in (200, 400, 404), (path, query, response.content[:300])
        assert response["Content-Type"] == "application/json"


# --- 2. no Basic challenge, JSON-only writes --------------------------------------------------


def test_no_answer_challenges_a_browser_to_prompt(client, api_users):
    job = lookup("demo.hello").as_user(api_users.member, "c")
    for method, path in (
        ("get", "/api/jobs/"),
        ("post", f"/api/jobs/{job.pk}/cancel/"),
        ("get", "/api/jobs/schedules/"),
        ("get", "/api/jobs/metrics/"),
        ("get", "/api/jobs/events/"),
    ):
        for credentials in ({}, basic("member", "wrong")):
            response = getattr(client, method)(path, **credentials)
            assert response.status_code == 401, (path, response.content[:200])
            challenge = response.get("WWW-Authenticate", "")
            assert challenge.split(" ")[0].lower() not in ("basic", "digest", "negotiate", "ntlm")


CROSS_SITE_BODIES = [
    {"content_type": "application/x-www-form-urlencoded", "data": ""},
    {"content_type": "application/x-www-form-urlencoded", "data": "kind=demo.hello"},
    {"content_type": "text/plain", "data": ""},
    {"content_type": "text/plain", "data": '{"kind": "demo.hello", "payload": "x"}'},
    {"content_type": "multipart/form-data; boundary=BoUnDaRy", "data": "--BoUnDaRy--\r\n"},
]


def send(client: Client, method: str, path: str, body: str, content_type: str, **extra):
    """A request with exactly this body and Content-Type (the test client sets none for an
    empty body otherwise)."""
    return client.generic(
        method, path, body.encode(), content_type=content_type, CONTENT_TYPE=content_type, **extra
    )


def test_a_cross_site_form_with_cached_basic_credentials_changes_nothing(client, api_users):
    job = lookup("demo.hello").as_user(api_users.member, "keep")
    failed = lookup("demo.hello").as_user(api_users.member, "failed")
    operations.cancel(failed.pk)
    schedule = Schedule.objects.create(owner=api_users.member, **{**SCHEDULE, "name": "s"})
    doors = [
        "/api/jobs/",
        f"/api/jobs/{job.pk}/cancel/",
        f"/api/jobs/{failed.pk}/retry/",
        "/api/jobs/schedules/",
    ]
    jobs_before = Job.objects.count()
    for path in doors:
        for body in CROSS_SITE_BODIES:
            response = send(client, "POST", path, body["data"], body["content_type"], **MEMBER)
            assert response.status_code == 415, (path, body, response.content)
            assert response.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"
        response = client.generic("POST", path, b"", **MEMBER)  # no Content-Type (a beacon)
        assert response.status_code == 415, (path, response.content)
    for body in CROSS_SITE_BODIES:
        path = f"/api/jobs/schedules/{schedule.pk}/"
        patched = send(client, "PATCH", path, body["data"], body["content_type"], **MEMBER)
        assert patched.status_code == 415
    job.refresh_from_db()
    failed.refresh_from_db()
    schedule.refresh_from_db()
    assert (job.state, failed.state, schedule.enabled) == ("queued", "cancelled", True)
    assert Job.objects.count() == jobs_before
    assert Schedule.objects.count() == 1

    # The same requests sent as JSON, credentials up front: a script's, which works.
    as_json = {"content_type": "application/json", **MEMBER}
    cancelled = send(client, "POST", f"/api/jobs/{job.pk}/cancel/", "", **as_json)
    assert cancelled.status_code == 200
    assert client.post(f"/api/jobs/{failed.pk}/retry/", "{}", **as_json).status_code == 200
    submitted = client.post("/api/jobs/", '{"kind": "demo.hello", "payload": "x"}', **as_json)
    assert submitted.status_code == 201
    body = json.dumps({**SCHEDULE, "name": "json"})
    assert client.post("/api/jobs/schedules/", body, **as_json).status_code == 201
    charset = {**as_json, "content_type": "application/json; charset=utf-8"}
    paused = client.patch(f"/api/jobs/schedules/{schedule.pk}/", '{"enabled": false}', **charset)
    assert paused.status_code == 200
    assert client.delete(f"/api/jobs/schedules/{schedule.pk}/", **MEMBER).status_code == 204


def test_cancel_reads_an_empty_json_object_and_refuses_fields(client, api_users):
    job = lookup("demo.hello").as_user(api_users.member, "c")
    as_json = {"content_type": "application/json", **MEMBER}
    refused = client.post(f"/api/jobs/{job.pk}/cancel/", '{"now": true}', **as_json)
    assert refused.status_code == 400 and "now" in refused.json()["errors"]
    assert client.post(f"/api/jobs/{job.pk}/cancel/", "{}", **as_json).status_code == 200


# --- 3. a member's past run_at is now ---------------------------------------------------------


def test_a_members_past_run_at_jumps_no_queue_and_fakes_no_age(client, api_users):
    as_json = {"content_type": "application/json"}
    with time_machine.travel(NOW, tick=False) as clock:
        first = lookup("demo.hello").as_user(api_users.other, "first")
        clock.shift(timedelta(seconds=5))
        for run_at in ("2000-01-01T00:00:00Z", "0001-01-02T00:00:00Z"):
            body = {"kind": "demo.hello", "payload": run_at, "run_at": run_at}
            response = client.post("/api/jobs/", json.dumps(body), **as_json, **MEMBER)
            assert response.status_code == 201
            assert datetime.fromisoformat(response.json()["run_at"]) == NOW + timedelta(seconds=5)
        # An operator's past run_at is kept: operators may backdate on purpose.
        body = {"kind": "demo.hello", "payload": "op", "run_at": "2026-03-02T08:00:00Z"}
        operator = client.post("/api/jobs/", json.dumps(body), **as_json, **OPERATOR)
        assert datetime.fromisoformat(operator.json()["run_at"]) == NOW - timedelta(hours=1)
        Job.objects.filter(pk=operator.json()["id"]).delete()
        clock.shift(timedelta(seconds=5))
        default = next(q for q in queue_stats()["queues"] if q["queue"] == "default")
        assert default["oldest_due_age_s"] == 10.0  # the other member's, submitted first
        claimed = claim(limit=1)
        assert [job.pk for job in claimed] == [first.pk]


# --- 4. throttles -----------------------------------------------------------------------------


def _submit(client: Client, credentials: dict[str, str], n: int) -> object:
    body = json.dumps({"kind": "demo.hello", "payload": f"n{n}"})
    return client.post("/api/jobs/", body, content_type="application/json", **credentials)


def _schedule(client: Client, credentials: dict[str, str], n: int) -> object:
    body = json.dumps({**SCHEDULE, "name": f"s{n}"})
    return client.post("/api/jobs/schedules/", body, content_type="application/json", **credentials)


def test_members_submits_and_schedule_creations_share_one_rate(client, api_users, settings):
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": "6/m"}
    with time_machine.travel(NOW, tick=False) as clock:
        for n in range(3):
            assert _submit(client, MEMBER, n).status_code == 201
            assert _schedule(client, MEMBER, n).status_code == 201
        for door in (_submit, _schedule):
            refused = door(client, MEMBER, 9)
            assert refused.status_code == 429
            assert refused["Retry-After"] == "10"  # one interval of 60 s / 6
            assert refused.json()["code"] == "THROTTLED"
            assert 'JOBS["MEMBER_RATE"]' in refused.json()["message"]
            assert refused.json()["message"].count("10") == 1  # the wait, said once
        assert Job.objects.count() == 3 and Schedule.objects.count() == 3
        # Another member, and operators, are not held back by this member's budget.
        assert _submit(client, basic("other", "pw-other"), 1).status_code == 201
        for n in range(20):
            assert _submit(client, OPERATOR, 100 + n).status_code == 201
        # Reading and cancelling are not throttled.
        assert client.get("/api/jobs/", **MEMBER).status_code == 200
        clock.shift(timedelta(seconds=10))
        assert _submit(client, MEMBER, 10).status_code == 201
        assert _submit(client, MEMBER, 11).status_code == 429
        clock.shift(timedelta(seconds=60))
        for n in range(6):
            assert _schedule(client, MEMBER, 20 + n).status_code == 201
    assert Throttle.objects.filter(key=f"member:{api_users.member.pk}").exists()


@pytest.mark.process
def test_the_member_rate_holds_across_web_processes(asgi_server, api_users, settings):
    import requests

    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": "3/h"}
    server = asgi_server({"JOBS_MEMBER_RATE": "3/h"})
    client = Client()
    for n in range(3):  # this process
        assert _submit(client, MEMBER, n).status_code == 201
    token = "a" * 32  # a CSRF token pair: the server process signs in by session
    answer = requests.post(  # another process: the same budget, spent
        f"{server.base}/api/jobs/",
        json={"kind": "demo.hello", "payload": "elsewhere"},
        headers={
            "Cookie": f"sessionid={session_cookie(api_users.member)}; csrftoken={token}",
            "X-CSRFToken": token,
        },
        timeout=30,
    )
    assert answer.status_code == 429, answer.text
    assert int(answer.headers["Retry-After"]) > 0
    assert Job.objects.count() == 3


def count_password_checks(monkeypatch) -> list[str]:
    """The usernames whose password Django's model backend checks (hashes), as they come."""
    from django.contrib.auth.backends import ModelBackend

    hashed: list[str] = []
    real = ModelBackend.authenticate

    def counting(self, request, username=None, password=None, **kwargs):
        hashed.append(username)
        return real(self, request, username=username, password=password, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", counting)
    return hashed


def test_refused_credentials_are_throttled_per_address_before_any_hashing(
    client, api_users, settings, monkeypatch
):
    settings.JOBS = {**settings.JOBS, "AUTH_FAILURE_RATE": "3/m"}
    hashed = count_password_checks(monkeypatch)
    wrong = basic("member", "guess")
    with time_machine.travel(NOW, tick=False) as clock:
        for _ in range(3):
            assert client.get("/api/jobs/", **wrong).status_code == 401
        assert len(hashed) == 3
        for credentials in (wrong, MEMBER):  # good ones too: the address has spent its budget
            refused = client.get("/api/jobs/", **credentials)
            assert refused.status_code == 429
            assert refused["Retry-After"] == "20"
            assert 'JOBS["AUTH_FAILURE_RATE"]' in refused.json()["message"]
            assert refused.json()["message"].count("20") == 1  # the wait, said once
        assert len(hashed) == 3  # no hashing for them
        # Another address is not held back; nor is a session.
        assert client.get("/api/jobs/", REMOTE_ADDR="10.0.0.2", **MEMBER).status_code == 200
        session = Client()
        session.force_login(api_users.member)
        assert session.get("/api/jobs/").status_code == 200
        clock.shift(timedelta(seconds=20))
        assert client.get("/api/jobs/", **MEMBER).status_code == 200
    # Malformed headers are refused without hashing, and count as refusals too.
    hashed.clear()
    for header in ("Basic", "Basic !!!", "Basic " + base64.b64encode(b"no-colon").decode()):
        assert client.get("/api/jobs/", HTTP_AUTHORIZATION=header).status_code == 401
    assert hashed == []


@pytest.mark.parametrize("path", ["/api/jobs/events/", "/api/jobs/metrics/"])
def test_the_stream_and_the_metrics_share_the_apis_budget_of_refused_credentials(
    client, api_users, settings, monkeypatch, path
):
    # Both are plain Django views that accept the API's credentials: a guess there costs a
    # password hash as on the API, so it spends the same budget, and past it nothing is hashed.
    settings.JOBS = {**settings.JOBS, "AUTH_FAILURE_RATE": "3/m"}
    hashed = count_password_checks(monkeypatch)
    wrong = basic("member", "guess")
    with time_machine.travel(NOW, tick=False) as clock:
        assert client.get("/api/jobs/", **wrong).status_code == 401  # one spent on the API
        for _ in range(2):
            assert client.get(path, **wrong).status_code == 401
        assert len(hashed) == 3
        for where in (path, "/api/jobs/"):
            refused = client.get(where, **wrong)
            assert refused.status_code == 429
            assert refused["Retry-After"] == "20"
            assert "AUTH_FAILURE_RATE" in refused.content.decode()
        assert len(hashed) == 3
        clock.shift(timedelta(seconds=20))
        assert client.get(path, **wrong).status_code == 401
    assert len(hashed) == 4


def _stream_request(user):
    # An ASGI request, as a stream needs (under WSGI the view answers 501).
    request = AsyncRequestFactory().get("/api/jobs/events/")
    request.user = user
    return request


def test_a_member_holds_at_most_max_streams_per_user_open(api_users, settings, monkeypatch):
    from django_jobs.events import sse

    monkeypatch.setattr(sse.relay, "ensure_started", lambda: None)  # no body is read here
    settings.JOBS = {**settings.JOBS, "MAX_STREAMS_PER_USER": 3}
    member = api_users.member
    opened = [events(_stream_request(member)) for _ in range(3)]
    assert [response.status_code for response in opened] == [200, 200, 200]
    refused = events(_stream_request(member))
    assert refused.status_code == 429
    assert refused["Retry-After"] == str(quota.RETRY_AFTER)
    assert json.loads(refused.content)["code"] == "TOO_MANY_STREAMS"
    # Another member and an operator are not counted against this member.
    other = events(_stream_request(api_users.other))
    operators = [events(_stream_request(api_users.operator)) for _ in range(5)]
    assert other.status_code == 200 and {r.status_code for r in operators} == {200}
    opened[0].close()  # a stream that ends gives its place back
    again = events(_stream_request(member))
    assert again.status_code == 200
    for response in [*opened, again, other, *operators]:
        response.close()
    assert quota.open_streams(member.pk) == 0


@pytest.mark.process
def test_the_stream_limit_holds_on_a_live_server_for_sse_and_websocket(asgi_server, api_users):
    from contextlib import ExitStack

    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect as ws_connect

    from tests.conftest import SSEClient

    server = asgi_server()
    cookie = session_cookie(api_users.member)
    limit = 8  # the default
    headers = {"Cookie": f"sessionid={cookie}"}
    streams = [SSEClient(server.base, cookie=cookie) for _ in range(limit - 1)]
    with ExitStack() as stack:
        socket = stack.enter_context(
            ws_connect(f"{server.ws_base}/ws/jobs/", additional_headers=headers)
        )
        assert [s.status for s in streams] == [200] * (limit - 1)
        refused = SSEClient(server.base, cookie=cookie)
        assert refused.status == 429
        assert refused.response.getheader("Retry-After") == str(quota.RETRY_AFTER)
        assert json.loads(refused.response.read())["code"] == "TOO_MANY_STREAMS"
        refused.close()
        extra = stack.enter_context(
            ws_connect(f"{server.ws_base}/ws/jobs/", additional_headers=headers)
        )
        with pytest.raises(ConnectionClosed) as closed:
            extra.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == quota.REFUSED_CODE
        socket.close()  # the WebSocket's place comes back

        def reopened() -> bool:
            attempt = SSEClient(server.base, cookie=cookie)
            streams.append(attempt)
            return attempt.status == 200

        wait_until(reopened, timeout=30, interval=0.2, message="the closed socket's place")
    for stream in streams:
        stream.close()


# --- 4. the schema is built once per process ----------------------------------------------


def test_the_schema_is_built_once(client, monkeypatch):
    SchemaView.built.clear()
    built: list[int] = []
    real = JobsSchemaGenerator.get_schema

    def counting(self, *args, **kwargs):
        built.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JobsSchemaGenerator, "get_schema", counting)
    first = client.get("/api/jobs/schema/?format=json")
    second = client.get("/api/jobs/schema/?format=json")
    yaml = client.get("/api/jobs/schema/")
    assert first.status_code == second.status_code == yaml.status_code == 200
    assert first.content == second.content
    assert yaml["Content-Type"].startswith("application/vnd.oai.openapi")
    assert first["Content-Type"] == "application/vnd.oai.openapi+json"
    assert len(built) == 1


# --- 5. small refusals are the API's JSON -----------------------------------------------------


def test_post_to_the_event_stream_is_a_json_405_not_the_csrf_page(api_users):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(api_users.member)
    response = browser.post("/api/jobs/events/")
    assert response.status_code == 405
    assert response.json()["code"] == "METHOD_NOT_ALLOWED"
    assert response["Allow"] == "GET"


def test_an_unknown_schema_format_is_a_json_404(client):
    for query in ("?format=xml", "?format=html", "?format=api"):
        response = client.get("/api/jobs/schema/" + query)
        assert response.status_code == 404, query
        assert response["Content-Type"] == "application/json"
        body = response.json()
        assert body["code"] == "NOT_FOUND" and "?format=json" in body["message"]


def test_the_idempotency_key_header_is_read_as_utf8(client, api_users):
    key = "clé-🔑"
    wire = key.encode().decode("latin-1")  # what WSGI and ASGI hand over
    body = json.dumps({"kind": "demo.hello", "payload": "k"})
    as_json = {"content_type": "application/json", **MEMBER}
    created = client.post("/api/jobs/", body, HTTP_IDEMPOTENCY_KEY=wire, **as_json)
    assert created.status_code == 201
    assert created.json()["idempotency_key"] == key
    same = client.post(
        "/api/jobs/",
        json.dumps({"kind": "demo.hello", "payload": "k", "idempotency_key": key}),
        **as_json,
    )
    assert same.status_code == 200 and same.json()["id"] == created.json()["id"]
    broken = client.post("/api/jobs/", body, HTTP_IDEMPOTENCY_KEY="\xff\xfe", **as_json)
    assert broken.status_code == 400
    assert "UTF-8" in broken.json()["errors"]["Idempotency-Key"][0]


# --- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "error"),
    [
        ({"MEMBER_RATE": "lots"}, "django_jobs.E009"),
        ({"AUTH_FAILURE_RATE": "0/m"}, "django_jobs.E009"),
        ({"MAX_STREAMS_PER_USER": 0}, "django_jobs.E012"),
        ({"MAX_STREAMS_PER_USER": "8"}, "django_jobs.E012"),
    ],
)
def test_the_throttle_settings_are_checked(settings, jobs, error):
    from django_jobs.checks import check_jobs_settings

    settings.JOBS = jobs
    assert error in [message.id for message in check_jobs_settings()]


def test_the_throttle_settings_may_be_off(settings):
    from django_jobs.checks import check_jobs_settings

    settings.JOBS = {"MEMBER_RATE": None, "AUTH_FAILURE_RATE": None, "MAX_STREAMS_PER_USER": None}
    assert check_jobs_settings() == []
