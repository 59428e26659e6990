"""Schedules belong to their owner: names are unique per owner, and each occurrence is admitted
like a job the owner submits (tenant from TENANT_OF; the owner must still be allowed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from django_jobs import schedule
from django_jobs.engine.schedules import undeclare
from django_jobs.models import Job, Schedule
from django_jobs.testing import fire_schedules

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
BODY = {
    "name": "every-5",
    "cron": "*/5 * * * *",
    "tz": "UTC",
    "kind": "api.report",
    "payload": {"title": "t"},
}


def tenant_of(user):
    return f"tenant-{user.username}"


@pytest.fixture
def member(api_users, api_client):
    return api_client(api_users.member)


@pytest.fixture
def other(api_users, api_client):
    return api_client(api_users.other)


@pytest.fixture
def operator(api_users, api_client):
    return api_client(api_users.operator)


def create(client, body=BODY):
    with time_machine.travel(NOW, tick=False):
        return client.post("/api/jobs/schedules/", body, format="json")


def fire(minutes: int = 5):
    with time_machine.travel(NOW + timedelta(minutes=minutes, seconds=1), tick=False):
        return fire_schedules()


def test_names_are_unique_per_owner(member, other, operator):
    assert create(member).status_code == 201
    assert create(other).status_code == 201  # another member's name reveals nothing
    assert create(operator).status_code == 201
    again = create(member)
    assert again.status_code == 400
    assert again.json()["errors"]["name"] == [
        "You already have a schedule with this name; pick another."
    ]
    assert Schedule.objects.filter(name="every-5").count() == 3


def test_two_owners_with_one_name_both_fire(member, other, api_users):
    create(member)
    create(other)
    fired = fire()
    assert sorted(j.owner_id for j in fired) == sorted([api_users.member.pk, api_users.other.pk])


def test_declared_names_are_unique_among_themselves(db):
    from django.db import IntegrityError, transaction

    Schedule.objects.create(name="nightly", cron="0 3 * * *", tz="UTC", kind="test.noop")
    with pytest.raises(IntegrityError), transaction.atomic():
        Schedule.objects.create(name="nightly", cron="0 4 * * *", tz="UTC", kind="test.noop")


def test_a_declared_schedule_beside_a_members_schedule_of_that_name(member, api_users):
    create(member)
    schedule("every-5", cron="*/5 * * * *", tz="UTC", job="test.noop", payload={})
    try:
        assert fire(0) == []  # the first sync: the declared row is created beside the member's
        fired = fire()
    finally:
        undeclare("every-5")
    assert sorted((j.kind, j.owner_id) for j in fired) == [
        ("api.report", api_users.member.pk),
        ("test.noop", None),
    ]


def test_a_scheduled_job_gets_its_owners_tenant(member, api_users, settings):
    settings.JOBS = {**settings.JOBS, "TENANT_OF": f"{__name__}.tenant_of"}
    create(member)
    [job] = fire()
    assert job.tenant == "tenant-member"
    assert job.owner_id == api_users.member.pk


def test_an_inactive_owner_pauses_the_schedule_with_the_reason(member, api_users):
    created = create(member).json()
    api_users.member.is_active = False
    api_users.member.save()
    assert fire() == []
    assert not Job.objects.exists()
    row = Schedule.objects.get()
    assert row.enabled is False and row.next_run_at is None
    assert "inactive" in row.paused_reason
    api_users.member.is_active = True
    api_users.member.save()
    url = f"/api/jobs/schedules/{created['id']}/"
    assert "inactive" in member.get(url).json()["paused_reason"]
    with time_machine.travel(NOW + timedelta(minutes=7), tick=False):
        resumed = member.patch(url, {"enabled": True}, format="json")
    assert resumed.json()["paused_reason"] is None
    assert len(fire(10)) == 1


def test_an_owner_no_longer_allowed_pauses_the_schedule(api_users, operator):
    # A member's schedule of an operator-only kind (the kind's rights changed since).
    with time_machine.travel(NOW, tick=False):
        Schedule.objects.create(
            name="legacy",
            cron="*/5 * * * *",
            tz="UTC",
            kind="test.noop",
            owner=api_users.member,
            checked_until=NOW,
        )
    assert fire() == []
    row = Schedule.objects.get()
    assert row.enabled is False
    assert "may no longer schedule 'test.noop'" in row.paused_reason
    listed = operator.get("/api/jobs/schedules/").json()["results"][0]
    assert listed["paused_reason"] == row.paused_reason
    assert not Job.objects.exists()


def test_an_operators_schedule_of_any_kind_keeps_firing(operator, api_users):
    create(operator, {**BODY, "kind": "test.noop", "payload": {}})
    [job] = fire()
    assert job.owner_id == api_users.operator.pk
    assert Schedule.objects.get().enabled is True
