"""Throttles and caps hold under concurrency (SPEC §7, "And: ..."; docs/security.md, Throttles).

Requests sent at once, each on its own thread and database connection, as web processes and
their threads send them: no more than the rate is admitted, and no more refused credentials
than the rate are hashed, and no member ends up owning more than ``JOBS["MEMBER_SCHEDULES"]``
schedules. The rates are per hour, so that the real clock adds no unit while the test runs;
nothing sleeps.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connections
from django.test import Client

from django_jobs.engine import schedules
from django_jobs.models import Job, Schedule, Throttle
from django_jobs.throttling import spend

THREADS = 20


def basic(username: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


def at_once(request: Callable[[int], int], n: int = THREADS) -> list[int]:
    """``request(i)`` on ``n`` threads released together; their status codes."""
    barrier = threading.Barrier(n)
    statuses: list[int] = [0] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            statuses[i] = request(i)
        except BaseException as exc:  # reported below, with the thread's own traceback
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return statuses


@pytest.mark.django_db(transaction=True)
def test_simultaneous_submits_never_admit_more_than_the_member_rate(api_users, settings):
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": "5/h"}
    member = basic("member", "pw-member")

    def submit(i: int) -> int:
        body = json.dumps({"kind": "demo.hello", "payload": f"n{i}"})
        answer = Client().post("/api/jobs/", body, content_type="application/json", **member)
        return answer.status_code

    statuses = at_once(submit)
    assert sorted(set(statuses)) == [201, 429], statuses
    assert statuses.count(201) == 5
    assert Job.objects.count() == 5


@pytest.mark.django_db(transaction=True)
def test_simultaneous_wrong_passwords_never_hash_more_than_the_failure_rate(
    api_users, settings, monkeypatch
):
    from django.contrib.auth.backends import ModelBackend

    settings.JOBS = {**settings.JOBS, "AUTH_FAILURE_RATE": "5/h"}
    hashed: list[str | None] = []
    real = ModelBackend.authenticate

    def counting(self, request, username=None, password=None, **kwargs):
        hashed.append(username)
        return real(self, request, username=username, password=password, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", counting)
    wrong = basic("member", "guess")
    statuses = at_once(lambda i: Client().get("/api/jobs/", **wrong).status_code)
    assert statuses.count(401) == 5 and statuses.count(429) == THREADS - 5, statuses
    assert len(hashed) == 5
    # From another address, good credentials give their unit back: signing in spends nothing.
    settings.JOBS = {**settings.JOBS, "AUTH_FAILURE_RATE": "25/h"}
    good = {**basic("other", "pw-other"), "REMOTE_ADDR": "10.0.0.2"}
    assert at_once(lambda i: Client().get("/api/jobs/", **good).status_code) == [200] * THREADS
    for _ in range(25):
        assert Client().get("/api/jobs/", **{**good, **wrong}).status_code == 401
    assert Client().get("/api/jobs/", **good).status_code == 429


@pytest.mark.django_db(transaction=True)
def test_a_budget_spent_at_once_by_threads_matches_its_count():
    statuses = at_once(lambda i: 201 if spend("member:race", "4/h") is None else 429)
    assert statuses.count(201) == 4
    assert Throttle.objects.filter(key="member:race").count() == 1


@pytest.mark.django_db
def test_a_moment_read_late_never_makes_the_budget_whole_again():
    # A request that read the clock, then waited while others spent the budget, sees the row
    # ahead of its moment by more than a window: it is refused, not handed a whole budget.
    now = datetime.now(UTC)
    for _ in range(4):
        assert spend("member:late", "4/h", now=now) is None
    assert spend("member:late", "4/h", now=now - timedelta(minutes=30)) is not None
    assert spend("member:late", "4/h", now=now) is not None
    # The clock itself went back (more than two windows): the budget is whole again.
    with time_machine.travel(now - timedelta(days=1), tick=False):
        for _ in range(4):
            assert spend("member:late", "4/h") is None
        assert spend("member:late", "4/h") is not None


SCHEDULE = {"every": "1m", "kind": "api.report", "payload": {"title": "t"}}


def schedules_at_once(n: int, names: str) -> list[int]:
    """``n`` schedules asked for at once by the member, each on its own connection."""
    member = basic("member", "pw-member")

    def add(i: int) -> int:
        body = json.dumps({**SCHEDULE, "name": f"{names}{i}"})
        answer = Client().post(
            "/api/jobs/schedules/", body, content_type="application/json", **member
        )
        return answer.status_code

    return at_once(add, n)


@pytest.mark.django_db(transaction=True)
def test_simultaneous_schedules_never_take_a_member_past_member_schedules(api_users, settings):
    # The cap counts the owner's rows; with none yet there is no row to lock, so the count is
    # made under a lock of the owner's own that always exists.
    assert settings.JOBS.get("MEMBER_SCHEDULES", 20) == 20
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": None, "AUTH_FAILURE_RATE": None}
    statuses = schedules_at_once(30, "first")
    assert statuses.count(201) == 20 and statuses.count(400) == 10, statuses
    assert Schedule.objects.filter(owner=api_users.member).count() == 20


@pytest.mark.django_db(transaction=True)
def test_simultaneous_schedules_fill_a_members_cap_exactly(api_users, settings):
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": None, "AUTH_FAILURE_RATE": None}
    for n in range(16):
        schedules.create(name=f"owned{n}", owner=api_users.member, **SCHEDULE)
    statuses = schedules_at_once(10, "more")
    assert statuses.count(201) == 4 and statuses.count(400) == 6, statuses
    assert Schedule.objects.filter(owner=api_users.member).count() == 20
    # Another member's cap is their own: the lock is per owner.
    assert schedules.create(name="theirs", owner=api_users.other, by=api_users.other, **SCHEDULE)
