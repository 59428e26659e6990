"""A project with only the README's quick-start lines works (SPEC §2): ``tests/quickstart``.

Its settings have no ``REST_FRAMEWORK`` and no ``EVENTSTREAM_*``; daphne serves it, a worker
(the test project's, for its job kinds) runs the jobs on the same database. The schema is
OpenAPI 3, an SSE client reconnecting with ``Last-Event-ID`` gets what it missed, the
WebSocket delivers events, and ``manage.py check`` has nothing to say about django_jobs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from django.core.management.utils import get_random_secret_key

from django_jobs.models import JobEventRecord
from testproject.jobs import count_to_100
from tests.conftest import ROOT, SSEClient, session_cookie, wait_until
from tests.integration.test_events_live import WSClient, check_counted_to_100, ended, row_ids

pytestmark = pytest.mark.process

QUICKSTART = {"DJANGO_SETTINGS_MODULE": "tests.quickstart.settings"}


@pytest.fixture
def quickstart(spawn, asgi_server):
    spawn("runjobs")
    return asgi_server(env=QUICKSTART, app="tests.quickstart.asgi:application")


def test_the_schema_is_openapi_3_without_any_rest_framework_setting(quickstart):
    url = f"{quickstart.base}/api/jobs/schema/?format=json"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        schema = json.loads(response.read())
    assert schema["openapi"].startswith("3.")
    assert "/api/jobs/{id}/" in schema["paths"]


def test_live_events_and_their_replay_without_any_eventstream_setting(
    quickstart, django_user_model, tmp_path
):
    alice = django_user_model.objects.create_user("alice")
    cookie = session_cookie(alice)
    marker = Path(tmp_path) / "go-on"
    sse = SSEClient(quickstart.base, cookie=cookie)
    ws = WSClient(quickstart, cookie)
    try:
        assert sse.next()["event"] == "stream-open"
        job = count_to_100.as_user(
            alice, {"pause": 0, "until": str(marker), "hold_at": 50, "test": "quick start"}
        )

        def at_50(e):
            return e["type"] == "job.progress" and e["job"]["progress"]["percent"] == 50

        before = sse.job_events(until=at_50)
        framed = ws.job_events(until=at_50)
    finally:
        sse.close()
    try:
        marker.touch()
        wait_until(
            lambda: JobEventRecord.objects.filter(job_id=job.pk, type="job.succeeded").exists()
        )
        again = SSEClient(quickstart.base, cookie=cookie, last_event_id=before[-1]["_id"])
        try:
            after = again.job_events(until=ended(job))
        finally:
            again.close()
        framed += ws.job_events(until=ended(job))
    finally:
        ws.close()
    ids = [e["_id"] for e in before + after]
    assert ids == [f"jobs-user-{alice.pk}:{i}" for i in row_ids(job)]  # nothing lost, no repeat
    check_counted_to_100(before + after)
    assert [e["_text"] for e in framed] == [e["_text"] for e in before + after]


def test_the_system_checks_have_nothing_to_say_about_django_jobs(worker_env):
    # Deployed with DEBUG off, the project has a secret key of its own (the servers above share
    # the test process's public one so its sessions work; W010 rightly warns of that one).
    deployed = {**worker_env, **QUICKSTART, "DJANGO_SECRET_KEY": get_random_secret_key()}
    checked = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        cwd=ROOT,
        env=deployed,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    assert "django_jobs" not in checked.stdout + checked.stderr
