"""The database goes away while browsers watch a job: their streams resume, nothing missed.

A worker runs a job a member watches over SSE and over a WebSocket. Halfway through, every
server connection of the worker and of the web process is ended (``pg_terminate_backend``:
the worker's claims, heartbeats and outcomes, the web process's LISTEN and its reads of event
rows). The worker reconnects and finishes the job; the web process's relay reconnects and
reads on from the last row it delivered. Both browsers, still connected, receive every event
of the job once, in order; a client that reconnects with ``Last-Event-ID`` gets the same.
PostgreSQL only (ending server connections is a server's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from django_jobs.models import JobEventRecord
from testproject.jobs import count_to_100
from tests.conftest import SSEClient, end_other_sessions, on_postgres, session_cookie
from tests.integration import test_events_live
from tests.integration.test_events_live import WSClient, check_counted_to_100, ended, row_ids

pytestmark = [pytest.mark.process, pytest.mark.postgres, pytest.mark.engine]

# A worker and a web server on the test database; alice, bob, olga (an operator).
live = test_events_live.live
users = test_events_live.users


def test_streams_resume_after_the_database_went_away(live, users, tmp_path):
    if not on_postgres():
        pytest.skip("ending the server's connections needs PostgreSQL")
    worker, server = live
    alice = users["alice"]
    cookie = session_cookie(alice)
    marker = Path(tmp_path) / "go-on"
    sse = SSEClient(server.base, cookie=cookie)
    ws = WSClient(server, cookie)
    try:
        assert sse.next()["event"] == "stream-open"
        job = count_to_100.as_user(
            alice, {"pause": 0, "until": str(marker), "hold_at": 50, "test": "outage"}
        )

        def at_50(e):
            return e["type"] == "job.progress" and e["job"]["progress"]["percent"] == 50

        before = sse.job_events(until=at_50)
        framed = ws.job_events(until=at_50)

        assert end_other_sessions() >= 2  # the worker's and the web process's
        marker.touch()
        after = sse.job_events(until=ended(job), timeout=60)
        framed += ws.job_events(until=ended(job), timeout=60)
    finally:
        sse.close()
        ws.close()

    ids = [e["_id"] for e in before + after]
    assert ids == [f"jobs-user-{alice.pk}:{i}" for i in row_ids(job)]  # nothing lost, no repeat
    check_counted_to_100(before + after)
    assert [e["_text"] for e in framed] == [e["_text"] for e in before + after]
    assert "Database unavailable" in worker.output() or "LISTEN connection lost" in (
        worker.output()
    )

    # A client that was away through it all reconnects and is given the rest.
    again = SSEClient(server.base, cookie=cookie, last_event_id=before[-1]["_id"])
    try:
        replayed = again.job_events(until=ended(job))
    finally:
        again.close()
    assert [e["_id"] for e in replayed] == [e["_id"] for e in after]
    assert JobEventRecord.objects.filter(job_id=job.pk, type="job.succeeded").count() == 1
