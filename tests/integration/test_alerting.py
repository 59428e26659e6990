"""The metrics the alert rules watch, and the rules shipped in docs/prometheus-rules.yml."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
import yaml
from django.urls import path

from django_jobs import operations
from django_jobs.engine.rows import fleet
from django_jobs.models import Job, JobRollup, Worker
from django_jobs.observability.metrics import metrics_view
from tests.conftest import ROOT
from tests.integration.test_metrics import operator, parse  # noqa: F401 - fixture

urlpatterns = [path("metrics/", metrics_view)]

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RULES = ROOT / "docs" / "prometheus-rules.yml"


def scrape(client, user) -> dict:
    client.force_login(user)
    response = client.get("/metrics/")
    assert response.status_code == 200
    return parse(response.content.decode())


def incident() -> None:
    """A fleet with one live worker, a lost one, a paused queue, kills and dead letters."""
    fleet.register("w-live", queues=["mail"], pid=1, hostname="a")
    fleet.register("w-all", pid=2, hostname="b")
    fleet.register("w-lost", pid=3, hostname="c")
    Worker.objects.filter(name="w-lost").update(heartbeat_at=T0 - timedelta(minutes=10))
    operations.pause_queue("mail", reason="SMTP down")
    for _ in range(2):
        Job.objects.create(kind="k", queue="mail", state="failed", error="boom")
    for minute, timeouts, lost in ((5, 2, 0), (30, 1, 1), (90, 7, 7)):
        JobRollup.objects.create(
            minute=T0 - timedelta(minutes=minute), queue="mail", kind="k", failed=timeouts + lost,
            timeouts=timeouts, lost=lost,
        )  # fmt: skip


@time_machine.travel(T0, tick=False)
def test_the_fleet_pauses_kills_and_dead_letters_are_served(client, operator):  # noqa: F811
    incident()
    with time_machine.travel(T0 + timedelta(minutes=20), tick=False):
        samples = scrape(client, operator)
    # w-live and w-all heartbeated 20 minutes ago here: past the lease, so lost too.
    assert ("django_jobs_workers", (("engine", "default"), ("queue", "mail"))) not in samples
    fresh = scrape(client, operator)
    assert fresh["django_jobs_workers", (("engine", "default"), ("queue", "mail"))] == 1
    assert fresh["django_jobs_workers", (("engine", "default"), ("queue", "*"))] == 1
    age = fresh[
        "django_jobs_worker_heartbeat_age_seconds", (("engine", "default"), ("worker", "w-lost"))
    ]
    assert age == 600
    assert samples["django_jobs_queue_paused", (("engine", "default"), ("queue", "mail"))] == 1
    paused_for = samples[
        "django_jobs_queue_paused_seconds", (("engine", "default"), ("queue", "mail"))
    ]
    assert paused_for == 1200
    # The last hour only: the kills of 90 minutes ago are left out.
    assert fresh["django_jobs_kills_last_hour", (("queue", "mail"), ("reason", "time_limit"))] == 3
    assert fresh["django_jobs_kills_last_hour", (("queue", "mail"), ("reason", "worker_lost"))] == 1
    assert fresh["django_jobs_dead_letters", (("queue", "mail"),)] == 2


def rule_metrics() -> dict[str, set[str]]:
    """Each alert's name -> the metric names its expression reads."""
    rules = yaml.safe_load(RULES.read_text())
    found = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= rule.keys(), rule
            assert rule["labels"]["severity"] in {"page", "warning", "info"}
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            found[rule["alert"]] = set(re.findall(r"\bdjango_jobs_[a-z_]+", rule["expr"]))
    return found


@time_machine.travel(T0, tick=False)
def test_every_metric_the_shipped_rules_read_is_served(client, operator):  # noqa: F811
    incident()
    Job.objects.create(kind="k", queue="mail", state="queued", run_at=T0 - timedelta(minutes=9))
    served = {name for name, _ in scrape(client, operator)}
    rules = rule_metrics()
    assert {
        "JobsNoLiveWorker", "JobsWorkerLost", "JobsQueueBackingUp", "JobsDeadLettersRising",
        "JobsQueuePausedForgotten", "JobsKilled",
    } <= rules.keys()  # fmt: skip
    for alert, names in rules.items():
        assert names, alert
        assert names <= served, (alert, names - served)


def test_the_observability_guide_shows_the_rules_file_as_shipped() -> None:
    guide = (ROOT / "docs" / "observability.md").read_text()
    assert f"```yaml\n{RULES.read_text()}```" in guide
