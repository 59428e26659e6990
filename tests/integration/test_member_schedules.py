"""Members' schedules cannot multiply their rate (SPEC §7, "And: ..."; docs/security.md).

A member's schedule fires at most once a minute (``every`` under a minute, or a seconds field,
is a 400 for members); a member owns at most ``JOBS["MEMBER_SCHEDULES"]`` schedules; and every
job a member's schedule fires spends a unit of the owner's ``JOBS["MEMBER_RATE"]``: past it
the occurrence is skipped, with a log line and ``signals.schedule_skipped``. The clock is moved
(time_machine), never slept on.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connections

from django_jobs.conf import DEFAULTS
from django_jobs.engine import schedules
from django_jobs.engine.schedules.scheduler import tick
from django_jobs.models import Job, Schedule
from django_jobs.signals import schedule_skipped

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
BODY = {"name": "pulse", "every": "1m", "kind": "api.report", "payload": {"title": "t"}}


@pytest.fixture
def member(api_users, api_client):
    return api_client(api_users.member)


@pytest.fixture
def operator(api_users, api_client):
    return api_client(api_users.operator)


@pytest.fixture
def skipped():
    heard: list[dict] = []

    def receiver(sender, **kwargs):
        heard.append(kwargs)

    schedule_skipped.connect(receiver)
    yield heard
    schedule_skipped.disconnect(receiver)


@pytest.mark.parametrize(
    ("timing", "field"),
    [
        ({"every": "1s"}, "every"),
        ({"every": "59s"}, "every"),
        ({"every": None, "cron": "* * * * * */20", "tz": "UTC"}, "cron"),
        ({"every": None, "cron": "0 3 * * * 30", "tz": "UTC"}, "cron"),
    ],
)
def test_a_members_schedule_fires_at_most_once_a_minute(member, operator, timing, field):
    refused = member.post("/api/jobs/schedules/", {**BODY, **timing}, format="json")
    assert refused.status_code == 400, refused.content
    assert "once a minute" in json.dumps(refused.json()["errors"][field])
    made = member.post("/api/jobs/schedules/", BODY, format="json")
    assert made.status_code == 201, made.content
    url = f"/api/jobs/schedules/{made.json()['id']}/"
    assert member.patch(url, timing, format="json").status_code == 400
    assert Schedule.objects.get().every == timedelta(minutes=1)
    # Operators schedule as often as they like.
    assert (
        operator.post("/api/jobs/schedules/", {**BODY, **timing}, format="json").status_code == 201
    )


def test_a_member_owns_at_most_member_schedules(member, operator, api_users, settings):
    assert DEFAULTS["MEMBER_SCHEDULES"] == 20
    settings.JOBS = {**settings.JOBS, "MEMBER_SCHEDULES": 3, "MEMBER_RATE": None}
    for n in range(3):
        assert (
            member.post(
                "/api/jobs/schedules/", {**BODY, "name": f"s{n}"}, format="json"
            ).status_code
            == 201
        )
    refused = member.post("/api/jobs/schedules/", {**BODY, "name": "s3"}, format="json")
    assert refused.status_code == 400, refused.content
    assert "MEMBER_SCHEDULES" in json.dumps(refused.json())
    assert Schedule.objects.filter(owner=api_users.member).count() == 3
    # Deleting one makes room; operators have no limit.
    first = Schedule.objects.filter(owner=api_users.member).first()
    assert member.delete(f"/api/jobs/schedules/{first.pk}/").status_code == 204
    assert (
        member.post("/api/jobs/schedules/", {**BODY, "name": "s3"}, format="json").status_code
        == 201
    )
    for n in range(5):
        body = {**BODY, "name": f"o{n}"}
        assert operator.post("/api/jobs/schedules/", body, format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_thirty_concurrent_creations_by_a_member_who_owns_none_make_twenty(
    api_users, api_client, settings
):
    """30 clients, each on its own thread and database connection, post a schedule at the same
    moment for a member who owns none yet: exactly ``MEMBER_SCHEDULES`` (20) are made, the rest
    refused with the reason. A lock on the owner's rows would hold nothing here (there are
    none): the count is taken under a lock keyed by the owner (``Store.lock_owner``)."""
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": None}
    clients = [api_client(api_users.member) for _ in range(30)]
    start = threading.Barrier(len(clients))
    answers: list[tuple[int, bytes]] = []

    def create(n: int) -> None:
        try:
            start.wait(timeout=30)
            answer = clients[n].post(
                "/api/jobs/schedules/", {**BODY, "name": f"c{n}"}, format="json"
            )
            answers.append((answer.status_code, answer.content))
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=create, args=(n,)) for n in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    codes = sorted(code for code, _ in answers)
    assert codes == [201] * 20 + [400] * 10, answers
    assert all(b"MEMBER_SCHEDULES" in body for code, body in answers if code == 400)
    assert Schedule.objects.filter(owner=api_users.member).count() == 20


def test_twenty_fast_schedules_of_a_member_fire_within_the_members_rate(
    api_users, settings, skipped, caplog
):
    # Schedules made in code (or by an operator) for a member owner, every second: the owner's
    # rate holds all the same, and each fires at most once a minute.
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": "10/m"}
    with time_machine.travel(NOW, tick=False) as clock:
        for n in range(20):
            schedules.create(
                name=f"fast{n}",
                every="1s",
                kind="api.report",
                payload={"title": f"t{n}"},
                owner=api_users.member,
            )
        with caplog.at_level(logging.WARNING, logger="django_jobs.scheduler"):
            for _ in range(60):
                clock.shift(timedelta(seconds=1))
                tick(datetime.now(UTC))
    fired = Job.objects.filter(owner=api_users.member)
    # A burst of the whole budget (10), then one every 6 s: at most 20 in the minute.
    assert 10 <= fired.count() <= 20, fired.count()
    per_schedule = {}
    for key in fired.values_list("idempotency_key", flat=True):
        name = key.split(":")[1]
        per_schedule[name] = per_schedule.get(name, 0) + 1
    assert max(per_schedule.values()) <= 1  # once a minute each, and the minute is not over
    assert skipped and all(s["schedule"].owner_id == api_users.member.pk for s in skipped)
    reasons = {s["reason"].split(";")[0].split(" (")[0] for s in skipped}
    assert reasons == {
        "a member's schedule fires at most once a minute",
        "its owner's rate is spent",
    }
    assert "skipped its" in caplog.text and "MEMBER_RATE" in caplog.text


def test_a_schedules_jobs_and_the_owners_submits_share_one_budget(
    member, operator, api_users, settings, skipped
):
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": "3/h"}
    with time_machine.travel(NOW, tick=False) as clock:
        made = member.post("/api/jobs/schedules/", BODY, format="json")  # one unit
        assert made.status_code == 201
        clock.shift(timedelta(minutes=1))
        assert len(tick(datetime.now(UTC))) == 1  # the second unit
        submit = {"kind": "api.report", "payload": {"title": "by hand"}}
        assert member.post("/api/jobs/", submit, format="json").status_code == 201  # the third
        again = {**submit, "payload": {"title": "again"}}
        assert member.post("/api/jobs/", again, format="json").status_code == 429
        clock.shift(timedelta(minutes=1))
        assert tick(datetime.now(UTC)) == []  # spent: skipped, not queued for later
        assert [s["schedule"].name for s in skipped] == ["pulse"]
        clock.shift(timedelta(minutes=20))  # one unit again (60 min / 3)
        assert len(tick(datetime.now(UTC))) == 1
    assert Job.objects.filter(owner=api_users.member).count() == 3
    # An operator's schedules spend nothing.
    with time_machine.travel(NOW + timedelta(minutes=30), tick=False) as clock:
        assert (
            operator.post(
                "/api/jobs/schedules/", {**BODY, "name": "ops"}, format="json"
            ).status_code
            == 201
        )
        clock.shift(timedelta(minutes=1))
        fired = tick(datetime.now(UTC))
    assert [job.owner_id for job in fired] == [api_users.operator.pk]
