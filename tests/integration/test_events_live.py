"""Live events end to end: a real worker process, a real ASGI server (daphne), real clients.

The worker (``manage.py runjobs``) stores each event as a row; daphne's relay reads the rows
(LISTEN/NOTIFY on PostgreSQL, a short poll on SQLite) and delivers them over SSE
(``/api/jobs/events/``) and WebSocket (``/ws/jobs/``). Clients sign in with a session cookie.
The tests wait on the other processes (their events, their rows), never on time.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from django_jobs.models import Job, JobEventRecord
from testproject.jobs import count_to_100
from tests.conftest import SSEClient, session_cookie, wait_until

pytestmark = pytest.mark.process


@pytest.fixture
def users(django_user_model):
    from django.contrib.auth.models import Permission

    make = django_user_model.objects.create_user
    users = {name: make(name) for name in ("alice", "bob", "olga")}
    users["olga"].user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    )
    return users


@pytest.fixture
def live(spawn, asgi_server):
    """A worker and a web server on the test database."""
    worker = spawn("runjobs", "--concurrency", "2")
    server = asgi_server()
    return worker, server


class WSClient:
    """A WebSocket client of ``/ws/jobs/`` (the ``websockets`` package)."""

    def __init__(self, server, cookie: str | None) -> None:
        headers = {"Cookie": f"sessionid={cookie}"} if cookie else {}
        self.stack = ExitStack()
        self.socket = self.stack.enter_context(
            ws_connect(f"{server.ws_base}/ws/jobs/", additional_headers=headers)
        )

    def job_events(self, until, timeout: float = 30) -> list[dict]:
        seen: list[dict] = []
        while True:
            text = self.socket.recv(timeout=timeout)
            data = json.loads(text)
            data["_text"] = text
            seen.append(data)
            if until(data):
                return seen

    def close(self) -> None:
        self.stack.close()


def ended(job: Job):
    return lambda data: data["job"]["id"] == job.pk and data["type"] == "job.succeeded"


def of(job: Job, events: list[dict]) -> list[dict]:
    return [e for e in events if e["job"]["id"] == job.pk]


def row_ids(job: Job) -> list[int]:
    return list(JobEventRecord.objects.filter(job_id=job.pk).values_list("id", flat=True))


def check_counted_to_100(events: list[dict], *, at_least: int = 1) -> None:
    """created, started, progress rising to 100 (``at_least`` of them), the log line, the end."""
    types = [e["type"] for e in events]
    assert types[:2] == ["job.created", "job.started"]
    assert types[-1] == "job.succeeded"
    assert sorted(set(types[2:-1])) == ["job.log", "job.progress"]
    assert [e["line"] for e in events if e["type"] == "job.log"] == ["counted to 100"]
    percents = [e["job"]["progress"]["percent"] for e in events if e["type"] == "job.progress"]
    assert percents == sorted(set(percents)) and percents[-1] == 100  # rising, in order
    assert len(percents) >= at_least
    assert events[-1]["job"]["state"] == "succeeded"
    assert events[-1]["job"]["progress"]["percent"] == 100


def test_a_workers_progress_reaches_sse_and_websocket_clients_in_order(live, users):
    _, server = live
    alice = users["alice"]
    cookie = session_cookie(alice)
    sse = SSEClient(server.base, cookie=cookie)
    assert sse.status == 200
    assert sse.next()["event"] == "stream-open"
    ws = WSClient(server, cookie)
    try:
        job = count_to_100.as_user(alice, {"pause": 0.1, "test": "in order"})
        streamed = sse.job_events(until=ended(job))
        framed = ws.job_events(until=ended(job))
    finally:
        sse.close()
        ws.close()
    check_counted_to_100(streamed, at_least=3)
    # The same rows, in id order, over both transports; the SSE id is "<channel>:<row id>".
    assert [e["_text"] for e in framed] == [e["_text"] for e in streamed]
    assert [e["_id"] for e in streamed] == [f"jobs-user-{alice.pk}:{i}" for i in row_ids(job)]
    assert Job.objects.get(pk=job.pk).state == "succeeded"


def test_events_reach_their_owner_and_operators_and_never_another_member(live, users):
    _, server = live
    alice, bob = users["alice"], users["bob"]
    cookies = {name: session_cookie(user) for name, user in users.items()}

    # Anonymous: refused on both transports.
    anonymous = SSEClient(server.base)
    assert anonymous.status == 401
    with pytest.raises(InvalidStatus) as refused:
        WSClient(server, None)
    assert refused.value.response.status_code == 403

    # Asking for other channels is refused: the server picks the caller's own.
    asking = SSEClient(
        server.base,
        cookie=cookies["bob"],
        path=f"/api/jobs/events/?channel=jobs-operators&channel=jobs-user-{alice.pk}",
    )
    assert asking.status == 400
    asking.close()
    sse = {name: SSEClient(server.base, cookie=cookie) for name, cookie in cookies.items()}
    ws = {name: WSClient(server, cookie) for name, cookie in cookies.items()}
    try:
        for client in sse.values():
            assert client.next()["event"] == "stream-open"
        alices = count_to_100.as_user(alice, {"pause": 0, "test": "alice's"})
        nobodys = count_to_100.enqueue({"pause": 0, "test": "nobody's"})
        wait_until(
            lambda: (
                JobEventRecord.objects.filter(
                    job_id__in=[alices.pk, nobodys.pk], type="job.succeeded"
                ).count()
                == 2
            )
        )
        # Bob's own job last: the rows go out in order, so when a client has its end it has
        # had every event stored before it.
        bobs = count_to_100.as_user(bob, {"pause": 0, "test": "bob's"})
        heard = {
            "alice": (
                sse["alice"].job_events(ended(alices)),
                ws["alice"].job_events(ended(alices)),
            ),
            "bob": (sse["bob"].job_events(ended(bobs)), ws["bob"].job_events(ended(bobs))),
            "olga": (
                sse["olga"].job_events(ended(bobs)),
                ws["olga"].job_events(ended(bobs)),
            ),
        }
    finally:
        for client in [*sse.values(), *ws.values()]:
            client.close()

    for name, (streamed, framed) in heard.items():
        assert [e["_text"] for e in streamed] == [e["_text"] for e in framed], name
    assert {e["job"]["id"] for e in heard["alice"][0]} == {alices.pk}
    assert {e["job"]["id"] for e in heard["bob"][0]} == {bobs.pk}
    operator_heard = heard["olga"][0]
    assert {e["job"]["id"] for e in operator_heard} == {alices.pk, nobodys.pk, bobs.pk}
    for job in (alices, nobodys, bobs):
        check_counted_to_100(of(job, operator_heard))
    check_counted_to_100(heard["alice"][0])
    check_counted_to_100(heard["bob"][0])


def test_a_client_reconnecting_with_last_event_id_gets_what_it_missed(live, users, tmp_path):
    _, server = live
    alice = users["alice"]
    cookie = session_cookie(alice)
    marker = Path(tmp_path) / "go-on"
    sse = SSEClient(server.base, cookie=cookie)
    try:
        job = count_to_100.as_user(
            alice, {"pause": 0, "until": str(marker), "hold_at": 50, "test": "replay"}
        )
        before = sse.job_events(
            until=lambda e: e["type"] == "job.progress" and e["job"]["progress"]["percent"] == 50
        )
    finally:
        sse.close()
    last_id = before[-1]["_id"]

    # While nobody listens, the job goes on to the end.
    marker.touch()
    wait_until(lambda: JobEventRecord.objects.filter(job_id=job.pk, type="job.succeeded").exists())

    again = SSEClient(server.base, cookie=cookie, last_event_id=last_id)
    try:
        after = again.job_events(until=ended(job))
    finally:
        again.close()
    ids = [e["_id"] for e in before + after]
    assert ids == [f"jobs-user-{alice.pk}:{i}" for i in row_ids(job)]  # nothing lost, no repeat
    check_counted_to_100(before + after)
    assert after[0]["job"]["progress"]["percent"] > 50


def test_two_web_processes_each_deliver_every_event_of_a_job_in_order(spawn, asgi_server, users):
    # A fleet's web tier: two daphne processes and a worker, with the database between them
    # and nothing else (no Redis). Each web process relays the rows on its own; a browser on
    # either gets the job's whole story, in the order the rows were stored.
    spawn("runjobs", "--concurrency", "2")
    first, second = asgi_server(), asgi_server()
    alice = users["alice"]
    cookie = session_cookie(alice)
    clients = {
        "sse on the first": SSEClient(first.base, cookie=cookie),
        "sse on the second": SSEClient(second.base, cookie=cookie),
    }
    for client in clients.values():
        assert client.status == 200
        assert client.next()["event"] == "stream-open"
    clients["websocket on the second"] = WSClient(second, cookie)
    clients["websocket on the first"] = WSClient(first, cookie)
    try:
        job = count_to_100.as_user(alice, {"pause": 0.05, "test": "two web processes"})
        heard = {name: client.job_events(until=ended(job)) for name, client in clients.items()}
    finally:
        for client in clients.values():
            client.close()
    texts = [e["_text"] for e in heard["sse on the first"]]
    check_counted_to_100(heard["sse on the first"], at_least=3)
    for name, events in heard.items():
        assert [e["_text"] for e in events] == texts, name
    rows = [f"jobs-user-{alice.pk}:{i}" for i in row_ids(job)]
    for name in ("sse on the first", "sse on the second"):
        assert [e["_id"] for e in heard[name]] == rows, name
    assert Job.objects.get(pk=job.pk).state == "succeeded"
