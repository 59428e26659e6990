"""The API, admin and CLI for interval schedules (``every``), six-field crons and a schedule's
enqueue options (queue, priority, expires); ``rate`` in the kinds manifest."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command

from django_jobs.models import Schedule
from django_jobs.testing import fire_schedules, run_until_idle

NOW = datetime(2026, 3, 2, 9, 0, 5, tzinfo=UTC)
SCHEDULE = {
    "name": "pulse",
    "every": "20s",
    "kind": "api.report",
    "payload": {"title": "pulse"},
}


@pytest.fixture
def member(api_users, api_client):
    return api_client(api_users.member)


@pytest.fixture
def operator(api_users, api_client):
    return api_client(api_users.operator)


def test_an_operator_adds_an_interval_schedule_and_it_fires_every_20s(operator):
    # A member's schedule fires at most once a minute (test_member_schedules.py).
    with time_machine.travel(NOW, tick=False) as clock:
        response = operator.post("/api/jobs/schedules/", SCHEDULE, format="json")
        assert response.status_code == 201, response.content
        data = response.json()
        assert (data["cron"], data["every"], data["tz"]) == (None, "20s", "UTC")
        assert (data["queue"], data["priority"], data["expires"]) == (None, None, None)
        assert data["next_run_at"] == "2026-03-02T09:00:20+00:00"
        clock.shift(timedelta(seconds=15))
        [job] = fire_schedules()
    assert job.idempotency_key == "schedule:pulse:2026-03-02T09:00:20+00:00"


def test_six_field_cron_over_the_api(operator):
    with time_machine.travel(NOW, tick=False):
        response = operator.post(
            "/api/jobs/schedules/",
            {**SCHEDULE, "every": None, "cron": "0 3 * * * 30", "tz": "Europe/Paris"},
            format="json",
        )
    assert response.status_code == 201, response.content
    data = response.json()
    assert (data["cron"], data["every"]) == ("0 3 * * * 30", None)
    assert data["next_run_at"] == "2026-03-03T02:00:30+00:00"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"cron": "* * * * *"}, "every", "not both"),
        ({"every": None}, "cron", "exactly one"),
        ({"every": "0.5s"}, "every", "1 second"),
        ({"every": "often"}, "every", "not a duration"),
        ({"every": True}, "every", "duration"),
        ({"expires": "later"}, "expires", "not a duration"),
        ({"every": None, "cron": "0 3 * * *"}, "tz", "tz"),
    ],
)
def test_bad_timing_is_a_400_naming_the_field(member, change, field, words):
    response = member.post("/api/jobs/schedules/", {**SCHEDULE, **change}, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors and words in json.dumps(errors)
    assert Schedule.objects.count() == 0


def test_a_member_may_not_set_queue_or_priority_and_an_operator_may(member, operator):
    for options in ({"queue": "fast"}, {"priority": -5}):
        refused = member.post("/api/jobs/schedules/", {**SCHEDULE, **options}, format="json")
        assert refused.status_code == 403, refused.content
        assert refused.json()["code"] == "OPERATOR_ONLY_FIELD"
    assert Schedule.objects.count() == 0
    with time_machine.travel(NOW, tick=False):
        body = {**SCHEDULE, "every": "1m", "expires": "10s"}
        mine = member.post("/api/jobs/schedules/", body, format="json")
        assert mine.status_code == 201, mine.content
        url = f"/api/jobs/schedules/{mine.json()['id']}/"
        assert member.patch(url, {"priority": 1}, format="json").status_code == 403
        body = {**SCHEDULE, "name": "ops", "queue": "fast", "priority": -5, "expires": 30}
        made = operator.post("/api/jobs/schedules/", body, format="json")
    assert made.status_code == 201, made.content
    data = made.json()
    assert (data["queue"], data["priority"], data["expires"]) == ("fast", -5, "30s")
    assert mine.json()["expires"] == "10s"


def test_patch_switches_between_cron_and_every(operator):
    with time_machine.travel(NOW, tick=False):
        made = operator.post("/api/jobs/schedules/", SCHEDULE, format="json").json()
        url = f"/api/jobs/schedules/{made['id']}/"
        both = operator.patch(url, {"cron": "0 * * * *"}, format="json")
        assert both.status_code == 400 and "every" in both.json()["errors"]
        switched = operator.patch(
            url, {"cron": "0 * * * *", "every": None, "tz": "UTC"}, format="json"
        )
    assert switched.status_code == 200, switched.content
    data = switched.json()
    assert (data["cron"], data["every"]) == ("0 * * * *", None)
    assert data["next_run_at"] == "2026-03-02T10:00:00+00:00"


def test_the_schema_describes_every_and_the_options(api_client):
    schema = api_client().get("/api/jobs/schema/?format=json").json()
    request = schema["components"]["schemas"]["ScheduleRequest"]["properties"]
    for name in ("cron", "every", "tz", "queue", "priority", "expires"):
        assert name in request, name
    assert "every" in schema["components"]["schemas"]["Schedule"]["properties"]
    kind = schema["components"]["schemas"]["Kind"]["properties"]
    assert "rate" in kind
    job = schema["components"]["schemas"]["Job"]["properties"]
    assert job["expires_at"]["format"] == "date-time"


def test_the_cli_shows_interval_schedules_and_the_kinds_rate(api_users):
    with time_machine.travel(NOW, tick=False):
        from django_jobs.engine import schedules

        schedules.create(name="pulse", every="20s", kind="test.noop", expires="1m")
        out = StringIO()
        call_command("jobs", "schedules", "--json", stdout=out)
        [row] = json.loads(out.getvalue())
        assert (row["cron"], row["every"], row["expires"]) == (None, "20s", "1m")
        assert row["next_runs"][0] == "2026-03-02T09:00:20+00:00"
        out = StringIO()
        call_command("jobs", "schedules", stdout=out)
        assert "every 20s" in out.getvalue()
    out = StringIO()
    call_command("jobs", "kinds", "--json", stdout=out)
    kinds = {row["kind"]: row for row in json.loads(out.getvalue())}
    assert all("rate" in row for row in kinds.values())
    out = StringIO()
    call_command("jobs", "kinds", stdout=out)
    assert "RATE" in out.getvalue()
    assert run_until_idle() == []


def test_the_admin_form_takes_every_and_the_options(api_users):
    import re

    from django.test import Client

    api_users.operator.is_staff = True
    api_users.operator.save()
    client = Client()
    client.force_login(api_users.operator)
    url = "/admin/django_jobs/schedule/"
    base = {
        "name": "pulse",
        "cron": "",
        "every": "20s",
        "tz": "UTC",
        "kind": "test.noop",
        "payload": "null",
        "catch_up": "skip",
        "enabled": "on",
        "owner": "",
        "queue": "",
        "priority": "",
        "expires": "",
    }
    with time_machine.travel(NOW, tick=False):
        for change, words in [
            ({"cron": "* * * * *"}, "not both"),
            ({"every": ""}, "exactly one"),
            ({"every": "0.2s"}, "1 second"),
            ({"expires": "soon"}, "not a duration"),
        ]:
            response = client.post(f"{url}add/", {**base, **change})
            assert response.status_code == 200, change
            errors = "".join(
                re.findall(r'<ul class="errorlist.*?</ul>', response.content.decode(), re.S)
            )
            assert words in errors, (change, errors)
        assert Schedule.objects.count() == 0
        response = client.post(
            f"{url}add/", {**base, "queue": "fast", "priority": "-2", "expires": "1m"}
        )
        assert response.status_code == 302, response.content[:2000]
        row = Schedule.objects.get(name="pulse")
        assert (row.cron, row.every) == ("", timedelta(seconds=20))
        assert (row.queue, row.priority, row.expires) == ("fast", -2, timedelta(minutes=1))
        assert row.next_run_at == datetime(2026, 3, 2, 9, 0, 20, tzinfo=UTC)
        listing = client.get(url).content.decode()
        assert "every 20s" in listing
        page = client.get(f"{url}{row.pk}/change/").content.decode()
        assert 'value="20s"' in page and 'value="1m"' in page
