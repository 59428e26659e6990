"""GET charts/: the series from the rollups, operators only, a malformed parameter named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from django_jobs.histograms import histogram
from django_jobs.models import JobRollup, RollupMark

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)


def client_for(operator: bool) -> APIClient:
    user, _ = User.objects.get_or_create(username="operator" if operator else "member")
    if operator:
        user.user_permissions.add(Permission.objects.get(codename="operate_jobs"))
    client = APIClient()
    client.force_authenticate(user)
    return client


def seed() -> None:
    RollupMark.objects.create(engine="default", closed_until=NOW.replace(second=0))
    rows = []
    for minute in range(1, 11):
        at = NOW.replace(second=0) - timedelta(minutes=minute)
        for kind, ms in (("app.fast", 20.0), ("app.slow", 2000.0)):
            rows.append(
                JobRollup(
                    minute=at,
                    queue="default",
                    kind=kind,
                    succeeded=3,
                    failed=1,
                    runtime=histogram([ms] * 4),
                    pickup=histogram([5.0] * 4),
                )
            )
        rows.append(JobRollup(minute=at, queue="default", kind="", depth=minute, oldest_age_s=9.0))
    rows.append(JobRollup(minute=NOW - timedelta(hours=3), queue="mail", kind="app.mail"))
    JobRollup.objects.bulk_create(rows)


@time_machine.travel(NOW, tick=False)
def test_an_operator_reads_the_series_of_a_window() -> None:
    seed()
    body = client_for(operator=True).get("/api/jobs/charts/?window=1h").json()
    assert (body["window"], body["bucket_s"], len(body["buckets"])) == ("1h", 60, 60)
    assert body["buckets"][-1] == "2026-03-02T12:00:00+00:00"
    assert sum(body["jobs"]["succeeded"]) == 60 and sum(body["jobs"]["failed"]) == 20
    assert body["jobs"]["succeeded"][-2] == 6  # 11:59: both kinds
    fast = body["runtime_ms"]["app.fast"]
    assert fast["p50"][-2] == pytest.approx(20, rel=0.1) and fast["p50"][-1] is None
    assert body["runtime_ms"]["app.slow"]["p95"][-2] == pytest.approx(2000, rel=0.1)
    assert body["pickup_ms"]["p50"][-2] == pytest.approx(5, rel=0.1)
    assert body["queues"]["default"]["depth"][-2] == 1
    assert body["choices"] == {"queues": ["default"], "kinds": ["app.fast", "app.slow"]}


@time_machine.travel(NOW, tick=False)
def test_a_day_of_one_kind() -> None:
    seed()
    # 11:45 is not folded yet: its minutes are read instead.
    RollupMark.objects.update(closed_until=NOW.replace(minute=55, second=0, hour=11))
    day = client_for(operator=True).get("/api/jobs/charts/?window=24h&kind=app.slow").json()
    assert (day["bucket_s"], len(day["buckets"])) == (900, 96)
    assert list(day["runtime_ms"]) == ["app.slow"] and sum(day["jobs"]["succeeded"]) == 30


def test_a_member_is_refused() -> None:
    response = client_for(operator=False).get("/api/jobs/charts/")
    assert response.status_code == 403


@time_machine.travel(NOW, tick=False)
def test_a_week_reads_the_hours_and_the_minutes_after_them() -> None:
    seed()
    hour = NOW.replace(minute=0, second=0) - timedelta(hours=5)
    JobRollup.objects.create(span=3600, minute=hour, queue="default", kind="app.fast", succeeded=40)
    # 11:00 is not folded yet: its minutes are read instead.
    RollupMark.objects.update(closed_until=NOW.replace(minute=55, second=0, hour=11))
    body = client_for(operator=True).get("/api/jobs/charts/?window=7d&queue=default").json()
    assert (body["bucket_s"], len(body["buckets"])) == (3600, 168)
    assert body["jobs"]["succeeded"][-6] == 40
    assert body["jobs"]["succeeded"][-2] == 60
    RollupMark.objects.update(closed_until=NOW.replace(second=0))  # folded: its hour row read
    body = client_for(operator=True).get("/api/jobs/charts/?window=7d&queue=default").json()
    assert body["jobs"]["succeeded"][-2] == 0
    assert "mail" not in body["queues"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("window=2h", "window"),
        ("window=", "window"),
        ("kind=", "kind"),
        ("queue=a%C2%9Eb", "queue"),
        ("queue=%01x", "queue"),
        ("since=1h", "since"),
    ],
)
def test_a_malformed_parameter_is_a_400_naming_it(query: str, named: str) -> None:
    response = client_for(operator=True).get(f"/api/jobs/charts/?{query}")
    assert response.status_code == 400
    body = response.json()
    assert list(body["errors"]) == [named]
    assert named in body["message"]


def test_anonymous_is_401() -> None:
    assert APIClient().get("/api/jobs/charts/").status_code == 401
