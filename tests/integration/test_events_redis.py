"""The fleet option: events through Redis (``EVENTSTREAM_REDIS`` and channels-redis).

A worker and daphne run with ``JOBS_EVENTS_REDIS`` (see testproject/settings.py), against the
Redis at 127.0.0.1:6379. Redis is stopped while a job runs: the job still succeeds, its events
stay in the rows, and once Redis is back the SSE stream catches up and new events flow over
both transports. Redis is running again when the test ends, whatever happens.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from django_jobs.models import Job, JobEventRecord
from tests.conftest import SSEClient, exclusive, session_cookie, wait_until
from tests.integration.test_events_live import WSClient, check_counted_to_100, ended, of, row_ids

pytestmark = pytest.mark.process

REDIS_URL = "redis://127.0.0.1:6379/0"
REDIS_SERVER = [
    "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
    "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
    "--logfile", "/var/log/redis/ci.log",
]  # fmt: skip


def redis_up() -> bool:
    import redis

    try:
        return bool(redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def start_redis() -> None:
    Path("/var/lib/redis").mkdir(parents=True, exist_ok=True)
    Path("/var/log/redis").mkdir(parents=True, exist_ok=True)
    subprocess.run(REDIS_SERVER, check=True, capture_output=True)
    wait_until(redis_up, timeout=30, message="redis-server did not come back")


@pytest.fixture
def redis_server():
    """The Redis at 127.0.0.1:6379, running before the test and after it, whatever happens,
    and used by no other test run of this machine meanwhile."""
    pytest.importorskip("channels_redis")
    with exclusive("redis"):  # a test here stops the server another environment may be using
        if not redis_up():
            if shutil.which("redis-server") is None:
                pytest.skip("needs Redis at 127.0.0.1:6379 (redis-server is not installed)")
            start_redis()
        try:
            yield
        finally:
            if not redis_up():
                start_redis()


def once(events: list[dict]) -> list[dict]:
    """SSE events without repeats. Around a Redis outage delivery is at least once: a stream
    catches up from the rows, and an event published late may follow; the id tells them apart."""
    seen: set[str] = set()
    return [e for e in events if not (e["_id"] in seen or seen.add(e["_id"]))]


def event_id(event: dict) -> int:
    """Through Redis each process publishes its own events: job.created (from the web process)
    and job.started (from the worker) may cross on the way. The ids give the order."""
    return int(event["_id"].rpartition(":")[2])


def created_and_ended(job: Job):
    """Until both job.created and job.succeeded of ``job`` are heard: job.created comes from
    the web process and the rest from the worker, so through Redis job.created may arrive
    after the end (right after a Redis restart, the web process's first publish reconnects)."""
    heard: set[str] = set()

    def until(data: dict) -> bool:
        if data["job"]["id"] == job.pk:
            heard.add(data["type"])
        return {"job.created", "job.succeeded"} <= heard

    return until


def submit(server, username: str, password: str, payload: dict) -> int:
    """POST a job to the API of ``server`` (HTTP Basic): the job is admitted by the web
    process, which publishes its job.created through Redis."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    request = urllib.request.Request(
        f"{server.base}/api/jobs/",
        data=json.dumps({"kind": "events.count", "payload": payload}).encode(),
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        return json.loads(response.read())["id"]


def test_with_redis_a_stopped_transport_never_fails_a_job_and_events_resume(
    spawn, asgi_server, redis_server, django_user_model, tmp_path
):
    env = {"JOBS_EVENTS_REDIS": REDIS_URL, "JOBS_EVENTS_REDIS_PREFIX": f"t{uuid.uuid4().hex}"}
    worker = spawn("runjobs", env=env)
    server = asgi_server(env=env)
    alice = django_user_model.objects.create_user("alice", password="pw-alice")
    cookie = session_cookie(alice)
    marker = tmp_path / "go-on"

    sse = SSEClient(server.base, cookie=cookie)
    assert sse.next()["event"] == "stream-open"
    ws = WSClient(server, cookie)
    old_ws = None
    try:
        first = Job(pk=submit(server, "alice", "pw-alice", {
            "pause": 0, "until": str(marker), "hold_at": 50, "test": f"redis {uuid.uuid4()}",
        }))  # fmt: skip

        def at_50(e):
            return e["job"]["id"] == first.pk and e["job"]["progress"]["percent"] == 50

        before = sse.job_events(until=at_50)
        # Through Redis, events stored by different processes (job.created by the web
        # process, the rest by the worker) are not ordered between them (docs/events.md):
        # both arrive; the order by event id is checked below, after the outage.
        assert {"job.created", "job.started"} <= {e["type"] for e in before}
        framed = ws.job_events(until=at_50)
        assert sorted(e["_text"] for e in framed) == sorted(e["_text"] for e in before)

        try:
            subprocess.run(["redis-cli", "-p", "6379", "shutdown", "nosave"], check=False)
            wait_until(lambda: not redis_up(), message="Redis did not stop")
            marker.touch()  # the job goes on while its transport is down...
            wait_until(lambda: Job.objects.get(pk=first.pk).state == "succeeded")
            # ...and its events are in the rows, for whoever reads them later.
            wait_until(
                lambda: JobEventRecord.objects.filter(
                    job_id=first.pk, type="job.succeeded"
                ).exists()
            )
        finally:
            if not redis_up():
                start_redis()

        # Redis is back: the stream resubscribes and reads what it missed from the rows.
        after = sse.job_events(until=ended(first))
        heard = sorted(once(before + after), key=event_id)
        assert [e["_id"] for e in heard] == [f"jobs-user-{alice.pk}:{i}" for i in row_ids(first)]
        check_counted_to_100(heard)

        # A new WebSocket gets the new events. The old one is closed only at the end: closing
        # a socket cancels its consumer's receive, and with channels_redis a blocking pop in
        # flight at that moment can take a message meant for another socket of the same
        # process and drop it (docs/events.md, "WebSocket delivery through Redis").
        old_ws, ws = ws, WSClient(server, cookie)
        second = Job(pk=submit(server, "alice", "pw-alice", {"pause": 0, "test": "after"}))
        streamed = sse.job_events(until=created_and_ended(second))
        framed = ws.job_events(until=ended(second))
    finally:
        sse.close()
        ws.close()
        if old_ws is not None:
            old_ws.close()
    streamed = sorted(once(of(second, streamed)), key=event_id)
    check_counted_to_100(streamed)
    # The WebSocket resumed (it heard the job end) with the stored texts. Every event is not
    # promised there: it has no replay, and right after Redis restarts a publish may find
    # only stale pooled connections and be dropped (docs/events.md); SSE, above, is exact.
    framed_texts = [e["_text"] for e in of(second, framed)]
    assert set(framed_texts) <= {e["_text"] for e in streamed}
    assert any(e["type"] == "job.succeeded" for e in of(second, framed))
    assert worker.popen.poll() is None  # the worker went on through it all
    assert "Lost the Redis subscription" in server.output()


def test_with_redis_two_web_processes_each_deliver_every_event_of_a_job(
    spawn, asgi_server, redis_server, django_user_model
):
    # Two web processes and a worker, the events carried by Redis: a browser on either
    # process, on either transport, gets every event of the job once; job.created comes from
    # the web process that admitted the job, the rest from the worker.
    env = {"JOBS_EVENTS_REDIS": REDIS_URL, "JOBS_EVENTS_REDIS_PREFIX": f"t{uuid.uuid4().hex}"}
    spawn("runjobs", env=env)
    first, second = asgi_server(env=env), asgi_server(env=env)
    alice = django_user_model.objects.create_user("alice", password="pw-alice")
    cookie = session_cookie(alice)
    sse = {
        "first": SSEClient(first.base, cookie=cookie),
        "second": SSEClient(second.base, cookie=cookie),
    }
    for client in sse.values():
        assert client.status == 200
        assert client.next()["event"] == "stream-open"
    ws = {"first": WSClient(first, cookie), "second": WSClient(second, cookie)}
    try:
        job = Job(
            pk=submit(first, "alice", "pw-alice", {"pause": 0.05, "test": f"two {uuid.uuid4()}"})
        )
        streamed = {name: client.job_events(until=ended(job)) for name, client in sse.items()}
        framed = {name: client.job_events(until=ended(job)) for name, client in ws.items()}
    finally:
        for client in [*sse.values(), *ws.values()]:
            client.close()
    rows = [f"jobs-user-{alice.pk}:{i}" for i in row_ids(job)]
    # Events of different processes may cross on the way (docs/events.md): the ids give the
    # order, and every row arrives exactly once on each stream.
    for name, events in streamed.items():
        assert (
            sorted((e["_id"] for e in events), key=lambda i: int(i.rpartition(":")[2])) == rows
        ), name
        check_counted_to_100(sorted(events, key=event_id))
    texts = sorted(e["_text"] for e in streamed["first"])
    for name, events in [*streamed.items(), *framed.items()]:
        assert sorted(e["_text"] for e in events) == texts, name
