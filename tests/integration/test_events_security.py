"""The streams' guards, end to end: a real worker, a real ASGI server (daphne), real clients.

- A member never receives a server traceback: a failing job's events reach its owner without
  it (live and on replay, SSE and WebSocket) and operators with it.
- The SSE stream reads only its documented parameters; anything else is a 400.
- The WebSocket refuses pages of other sites (``Origin``), even with ``ALLOWED_HOSTS = ["*"]``.
- Streams close once their user's sign-in ends (signed out, deactivated).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from django.contrib.sessions.models import Session
from websockets.exceptions import ConnectionClosed, InvalidStatus

from django_jobs.events.signin import RECHECK_EVERY
from django_jobs.models import Job, JobEventRecord
from django_jobs.serialize import TRACEBACK_MARKER
from testproject.jobs import with_steps
from tests.conftest import SSEClient, session_cookie, wait_until
from tests.integration.test_events_live import WSClient
from tests.integration.test_events_redis import REDIS_URL, redis_server  # noqa: F401

pytestmark = pytest.mark.process


@pytest.fixture
def users(django_user_model):
    from django.contrib.auth.models import Permission

    make = django_user_model.objects.create_user
    users = {name: make(name) for name in ("alice", "olga")}
    users["olga"].user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    )
    return users


def failed(job: Job):
    return lambda data: data["job"]["id"] == job.pk and data["type"] == "job.failed"


@pytest.mark.parametrize("transport", ["database", "redis"])
def test_a_failing_jobs_traceback_reaches_operators_and_never_its_owner(
    spawn, asgi_server, users, transport, request
):
    env = {}
    if transport == "redis":  # the fleet option: both transports through Redis
        request.getfixturevalue("redis_server")
        env = {"JOBS_EVENTS_REDIS": REDIS_URL, "JOBS_EVENTS_REDIS_PREFIX": f"t{uuid.uuid4().hex}"}
    spawn("runjobs", env=env)
    server = asgi_server(env=env)
    alice, olga = users["alice"], users["olga"]
    cookies = {name: session_cookie(user) for name, user in users.items()}
    sse = {name: SSEClient(server.base, cookie=cookie) for name, cookie in cookies.items()}
    ws = {name: WSClient(server, cookie) for name, cookie in cookies.items()}
    try:
        for client in sse.values():
            assert client.next()["event"] == "stream-open"
        job = with_steps.as_user(alice, {"fail": True, "test": "traceback"})
        heard = {
            name: (sse[name].job_events(until=failed(job)), ws[name].job_events(until=failed(job)))
            for name in users
        }
    finally:
        for client in [*sse.values(), *ws.values()]:
            client.close()
    assert Job.objects.get(pk=job.pk).state == "failed"
    stored = JobEventRecord.objects.get(job_id=job.pk, type="job.failed")
    full_error = json.loads(stored.data)["job"]["error"]
    assert TRACEBACK_MARKER in full_error and "testproject/jobs.py" in full_error

    owner_sse, owner_ws = heard["alice"]
    operator_sse, operator_ws = heard["olga"]
    # The operator: the stored text, traceback and all, on both transports.
    assert operator_sse[-1]["_text"] == operator_ws[-1]["_text"] == stored.data
    # The owner: the same event, the error's message without the traceback.
    for events in (owner_sse, owner_ws):
        text = events[-1]["_text"]
        assert "Traceback" not in text and "jobs.py" not in text
        assert events[-1]["job"]["error"] == full_error.split(TRACEBACK_MARKER)[0]
        assert "store refused" in events[-1]["job"]["error"]
    assert [e["_text"] for e in owner_sse] == [e["_text"] for e in owner_ws]

    # Replayed from the rows after a reconnection, too.
    first_id = owner_sse[0]["_id"]
    again = SSEClient(server.base, cookie=cookies["alice"], last_event_id=first_id)
    try:
        replayed = again.job_events(until=failed(job))
    finally:
        again.close()
    assert [e["_text"] for e in replayed] == [e["_text"] for e in owner_sse[1:]]
    operator_again = SSEClient(
        server.base, cookie=cookies["olga"], last_event_id=operator_sse[0]["_id"]
    )
    try:
        assert operator_again.job_events(until=failed(job))[-1]["_text"] == stored.data
    finally:
        operator_again.close()
    assert olga.pk != alice.pk


def raw_status(server, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """The status and body of a request to the real server (a 400 comes back at once)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read() if response.status != 200 else b""
    finally:
        conn.close()


def test_the_stream_answers_400_to_what_it_does_not_read(asgi_server, users):
    server = asgi_server()
    cookie = {"Cookie": f"sessionid={session_cookie(users['alice'])}"}
    refused = [
        ("/api/jobs/events/?es-meta=garbage", {}),
        ("/api/jobs/events/?recover=true", {}),
        ("/api/jobs/events/?channel=jobs-operators", {}),
        ("/api/jobs/events/", {"Last-Event-ID": "jobs-user-1:abc"}),
        ("/api/jobs/events/?lastEventId=error", {}),
    ]
    for path, headers in refused:
        status, body = raw_status(server, path, {**cookie, **headers})
        assert status == 400, (path, headers)
        answer = json.loads(body)
        assert answer["code"] == "INVALID_STREAM_REQUEST"
        assert "Last-Event-ID" in answer["message"] and "lastEventId" in answer["message"]
    # An id as the stream sends it opens the stream.
    ok = SSEClient(
        server.base,
        cookie=cookie["Cookie"].partition("=")[2],
        last_event_id=f"jobs-user-{users['alice'].pk}:0",
    )
    try:
        assert ok.status == 200 and ok.next()["event"] == "stream-open"
    finally:
        ok.close()


def ws_with_origin(server, cookie: str, origin: str | None) -> WSClient:
    client = WSClient.__new__(WSClient)
    from contextlib import ExitStack

    from websockets.sync.client import connect

    headers = {"Cookie": f"sessionid={cookie}"}
    client.stack = ExitStack()
    client.socket = client.stack.enter_context(
        connect(f"{server.ws_base}/ws/jobs/", additional_headers=headers, origin=origin)
    )
    return client


def test_the_websocket_refuses_pages_of_other_sites(asgi_server, users, settings):
    server = asgi_server()  # testproject: ALLOWED_HOSTS = ["*"]
    cookie = session_cookie(users["alice"])
    for foreign in ("http://evil.example", f"http://127.0.0.1:{server.port + 1}", "null"):
        with pytest.raises(InvalidStatus) as refused:
            ws_with_origin(server, cookie, foreign)
        assert refused.value.response.status_code == 403, foreign
    for own in (f"http://127.0.0.1:{server.port}", None):  # the site's page; not a browser
        ws_with_origin(server, cookie, own).close()


def closes_within(read, bound: float) -> float:
    """Seconds until ``read()`` reports the stream ended (it returns True then)."""
    start = time.monotonic()
    wait_until(read, timeout=bound, interval=0.05, message=f"still open after {bound}s")
    return time.monotonic() - start


def sse_ended(client: SSEClient):
    def read() -> bool:
        try:
            event = client.events.get(timeout=0.05)
        except Exception:
            return False
        if event is None:
            return True
        if event.get("event") == "stream-error":
            client.ended_with = json.loads(event["data"])
        return False

    return read


def ws_ended(client: WSClient):
    def read() -> bool:
        try:
            client.socket.recv(timeout=0.05)
        except TimeoutError:
            return False
        except ConnectionClosed as closed:
            client.code = closed.rcvd.code if closed.rcvd else None
            return True
        return False

    return read


def test_streams_close_once_their_user_signs_out_or_is_deactivated(asgi_server, users):
    server = asgi_server()
    bound = RECHECK_EVERY + 5  # the re-check interval, and slack for a busy machine
    alice = users["alice"]
    signed_out = session_cookie(alice)
    kept = session_cookie(alice)
    sse, ws = SSEClient(server.base, cookie=signed_out), WSClient(server, signed_out)
    other_sse = SSEClient(server.base, cookie=kept)
    try:
        assert sse.next()["event"] == "stream-open"
        assert other_sse.next()["event"] == "stream-open"
        Session.objects.filter(session_key=signed_out).delete()  # what logout does
        closes_within(sse_ended(sse), bound)
        assert sse.ended_with["condition"] == "unauthorized"
        closes_within(ws_ended(ws), bound)
        assert ws.code == 4401
        # The other session of the same user stays open...
        assert other_sse.closed is False and other_sse.events.empty()
        # ...until the user is deactivated.
        alice.is_active = False
        alice.save(update_fields=["is_active"])
        closes_within(sse_ended(other_sse), bound)
    finally:
        for client in (sse, ws, other_sse):
            client.close()
    # A new connection with the deleted session is refused outright.
    assert SSEClient(server.base, cookie=signed_out).status == 401
