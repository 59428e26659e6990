"""One job's stream (``events/?job=ID``, ``ws/jobs/?job=ID``; SPEC §8), end to end.

A real worker, a real ASGI server (daphne) and real clients: the stream carries the job's
events and its children's only, for its owner and operators; anyone else, and a job that does
not exist, get the same 404 (the WebSocket refuses the handshake); ``Last-Event-ID`` replays
only that job's events. The tests wait on the other processes, never on time.
"""

from __future__ import annotations

import json
import uuid

import pytest
from websockets.exceptions import InvalidStatus

from django_jobs.models import Job, JobEventRecord
from testproject.jobs import count_to_100, fan
from tests.conftest import SSEClient, session_cookie, wait_until
from tests.integration.test_events_live import WSClient
from tests.integration.test_events_redis import REDIS_URL, redis_server  # noqa: F401
from tests.integration.test_events_security import raw_status

pytestmark = pytest.mark.process

EVENTS = "/api/jobs/events/"


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
    worker = spawn("runjobs", "--concurrency", "3")
    server = asgi_server()
    return worker, server


def ended(job: Job):
    return lambda data: data["job"]["id"] == job.pk and data["type"] == "job.succeeded"


class JobWS(WSClient):
    """A WebSocket client of ``/ws/jobs/?job=ID``."""

    def __init__(self, server, cookie: str, job_id: int | str) -> None:
        from contextlib import ExitStack

        from websockets.sync.client import connect

        self.stack = ExitStack()
        self.socket = self.stack.enter_context(
            connect(
                f"{server.ws_base}/ws/jobs/?job={job_id}",
                additional_headers={"Cookie": f"sessionid={cookie}"},
            )
        )


def held_at_50(job: Job) -> int | None:
    """The id of the job's stored ``job.progress`` event at 50 %, once it is stored."""
    rows = JobEventRecord.objects.filter(job_id=job.pk, type="job.progress").order_by("id")
    for event_id, data in rows.values_list("id", "data"):
        if json.loads(data)["job"]["progress"]["percent"] == 50:
            return event_id
    return None


def row_ids(*jobs: Job) -> list[int]:
    return list(
        JobEventRecord.objects.filter(job_id__in=[j.pk for j in jobs])
        .order_by("id")
        .values_list("id", flat=True)
    )


@pytest.mark.parametrize("transport", ["database", "redis"])
def test_a_job_stream_carries_that_jobs_events_only_while_another_job_runs(
    spawn, asgi_server, users, tmp_path, transport, request
):
    env = {}
    if transport == "redis":  # the fleet option: both transports through Redis
        request.getfixturevalue("redis_server")
        env = {"JOBS_EVENTS_REDIS": REDIS_URL, "JOBS_EVENTS_REDIS_PREFIX": f"t{uuid.uuid4().hex}"}
    spawn("runjobs", "--concurrency", "3", env=env)
    server = asgi_server(env=env)
    alice = users["alice"]
    cookie = session_cookie(alice)
    hold = tmp_path / "go-on"
    # A holds at 50 % until the file exists; B runs to its end meanwhile.
    a = count_to_100.as_user(alice, {"pause": 0.02, "until": str(hold), "hold_at": 50})
    # The streams open while A is held, silent: each of them hears the same events from then on
    # (a stream opened while A was still counting would start at another of its events).
    wait_until(lambda: held_at_50(a) is not None, message="A did not reach its hold")
    held = held_at_50(a)
    everything = SSEClient(server.base, cookie=cookie)
    only_a = SSEClient(server.base, cookie=cookie, path=f"{EVENTS}?job={a.pk}")
    ws_a = JobWS(server, cookie, a.pk)
    operator_a = SSEClient(
        server.base, cookie=session_cookie(users["olga"]), path=f"{EVENTS}?job={a.pk}"
    )
    try:
        assert only_a.status == 200 and only_a.next()["event"] == "stream-open"
        assert operator_a.status == 200 and operator_a.next()["event"] == "stream-open"
        assert everything.next()["event"] == "stream-open"
        b = count_to_100.as_user(alice, {"pause": 0.01, "n": "b"})
        # B ran to its end while A's stream was open (the stream of all her jobs saw it).
        seen_all = everything.job_events(until=ended(b))
        assert any(e["job"]["id"] == b.pk for e in seen_all)
        hold.write_text("go")
        heard = only_a.job_events(until=ended(a))
        heard_ws = ws_a.job_events(until=ended(a))
        heard_operator = operator_a.job_events(until=ended(a))
    finally:
        for client in (everything, only_a, ws_a, operator_a):
            client.close()

    # Only A's events, each once, in order: live, over SSE and WebSocket, for its owner and an
    # operator alike.
    for events in (heard, heard_ws, heard_operator):
        assert {e["job"]["id"] for e in events} == {a.pk}
        assert events[-1]["type"] == "job.succeeded"
    a_rows = row_ids(a)
    assert [int(e["_id"].rpartition(":")[2]) for e in heard] == [i for i in a_rows if i > held]
    assert [e["_text"] for e in heard_ws] == [e["_text"] for e in heard]
    assert [e["_id"] for e in heard_operator] == [f"jobs-operators:{i}" for i in a_rows if i > held]

    # Replay: reconnecting with the id of A's event before its hold gives A's later events
    # only, although B's events were stored in between.
    assert any(held < i < a_rows[-1] for i in row_ids(b))
    first = f"{heard[0]['_id'].rpartition(':')[0]}:{held}"
    again = SSEClient(server.base, cookie=cookie, last_event_id=first, path=f"{EVENTS}?job={a.pk}")
    try:
        assert again.status == 200
        replayed = again.job_events(until=ended(a))
    finally:
        again.close()
    assert [e["_text"] for e in replayed] == [e["_text"] for e in heard]


def test_a_parents_stream_carries_its_childrens_events(live, users, tmp_path):
    _, server = live
    alice = users["alice"]
    cookie = session_cookie(alice)
    hold = tmp_path / "children-go-on"
    # The children wait for the file: their ends come while the parent's stream is open.
    parent = fan.as_user(alice, {"children": [{"n": n, "until": str(hold)} for n in (2, 3)]})
    stream = SSEClient(server.base, cookie=cookie, path=f"{EVENTS}?job={parent.pk}")
    try:
        assert stream.next()["event"] == "stream-open"
        other = count_to_100.as_user(alice, {"pause": 0.01, "n": "other"})
        # Another job of hers runs to its end while the stream is open.
        wait_until(lambda: Job.objects.get(pk=other.pk).state == "succeeded")
        hold.write_text("go")
        live_events = stream.job_events(until=ended(parent))
    finally:
        stream.close()
    children = set(Job.objects.filter(parent=parent).values_list("pk", flat=True))
    assert len(children) == 2
    # Live: the children's ends (they were spawned before the stream opened), never another
    # job's.
    assert {e["job"]["id"] for e in live_events} <= {parent.pk, *children}
    ends = {e["job"]["id"] for e in live_events if e["type"] == "job.succeeded"}
    assert ends == {parent.pk, *children}

    # Replayed from the first event on: the parent's and the children's, all of them.
    replay = SSEClient(
        server.base,
        cookie=cookie,
        last_event_id=f"jobs-user-{alice.pk}:0",
        path=f"{EVENTS}?job={parent.pk}",
    )
    try:
        replayed = replay.job_events(until=ended(parent))
    finally:
        replay.close()
    rows = row_ids(parent, *Job.objects.filter(parent=parent))
    assert [int(e["_id"].rpartition(":")[2]) for e in replayed] == rows
    assert other.pk not in {e["job"]["id"] for e in replayed}


def test_only_who_may_see_the_job_may_follow_it(live, users):
    _, server = live
    alice_job = count_to_100.as_user(users["alice"], {"pause": 0.01})
    bob = {"Cookie": f"sessionid={session_cookie(users['bob'])}"}
    missing = Job.objects.order_by("-pk").values_list("pk", flat=True)[0] + 1000

    answers = [
        raw_status(server, f"{EVENTS}?job={job_id}", bob) for job_id in (alice_job.pk, missing)
    ]
    # Another member's job and a job that does not exist: the same 404, so ids cannot be probed.
    assert [status for status, _ in answers] == [404, 404]
    assert answers[0][1] == answers[1][1]
    assert json.loads(answers[0][1])["code"] == "NOT_FOUND"
    bob_cookie = bob["Cookie"].partition("=")[2]
    for job_id in (alice_job.pk, missing):
        with pytest.raises(InvalidStatus) as refused:
            JobWS(server, bob_cookie, job_id)
        assert refused.value.response.status_code == 403
    # Anonymous: 401 as for the stream of all events.
    assert raw_status(server, f"{EVENTS}?job={alice_job.pk}", {})[0] == 401


@pytest.mark.parametrize("query", ["job=abc", "job=0", "job=-1", "job=01", "job=", "job=1&job=2"])
def test_a_malformed_job_is_a_400_and_a_refused_handshake(asgi_server, users, query):
    server = asgi_server()
    cookie = session_cookie(users["olga"])
    status, body = raw_status(server, f"{EVENTS}?{query}", {"Cookie": f"sessionid={cookie}"})
    assert status == 400
    answer = json.loads(body)
    assert answer["code"] == "INVALID_STREAM_REQUEST" and list(answer["errors"]) == ["job"]
    with pytest.raises(InvalidStatus):
        JobWS(server, cookie, query.removeprefix("job="))
    # The socket reads no other parameter either.
    with pytest.raises(InvalidStatus):
        JobWS(server, cookie, "1&channel=jobs-operators")
