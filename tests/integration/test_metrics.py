"""The Prometheus metrics view: who may read it, and what it says about real rows."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import Permission
from django.test import override_settings
from django.urls import path

from django_jobs.models import Job
from django_jobs.observability.metrics import metrics_view
from django_jobs.states import JobState

urlpatterns = [path("metrics/", metrics_view)]

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')
_keys = count()


def staff_only(user) -> bool:
    return user.is_staff


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of the exposition text keyed by (name, sorted labels); checks every line."""
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) django_jobs_[a-z_]+ \S", line), line
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        pairs = tuple(
            sorted(
                (k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
                for k, v in LABEL.findall(labels or "")
            )
        )
        samples[(name, pairs)] = float(value)
    return samples


def add(
    state: str,
    *,
    kind: str = "test.noop",
    queue: str = "default",
    run_at=None,
    started_at=None,
    ended_at=None,
    derived: bool = False,
) -> Job:
    return Job.objects.create(
        kind=kind,
        queue=queue,
        state=state,
        idempotency_key=f"k{next(_keys)}",
        created_at=T0 - timedelta(hours=1),
        run_at=run_at or T0 - timedelta(hours=1),
        started_at=started_at,
        ended_at=ended_at,
        timestamps_derived=derived,
        attempts=1 if started_at else 0,
    )


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("op", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="operate_jobs"))
    return user


# --- permissions ----------------------------------------------------------------------------


def test_anonymous_gets_401_with_a_challenge(client):
    response = client.get("/metrics/")
    assert response.status_code == 401
    # Not Basic: a browser would prompt, then cache the credentials (docs/security.md).
    assert response["WWW-Authenticate"] == 'Session realm="api"'
    assert "operator" in response.content.decode()


def test_a_member_gets_403(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("member", password="pw"))
    response = client.get("/metrics/")
    assert response.status_code == 403
    assert "operate_jobs" in response.content.decode()


def test_an_operator_reads_the_metrics(client, operator):
    client.force_login(operator)
    response = client.get("/metrics/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert response["Cache-Control"] == "no-store"
    assert client.post("/metrics/").status_code == 405


def test_a_scraper_signs_in_with_http_basic(client, operator):
    good = "Basic " + base64.b64encode(b"op:pw").decode()
    bad = "Basic " + base64.b64encode(b"op:wrong").decode()
    assert client.get("/metrics/", HTTP_AUTHORIZATION=good).status_code == 200
    assert client.get("/metrics/", HTTP_AUTHORIZATION=bad).status_code == 401


def test_is_operator_setting_replaces_the_permission(client, django_user_model, operator):
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    jobs = {**settings.JOBS, "IS_OPERATOR": f"{__name__}.staff_only"}
    with override_settings(JOBS=jobs):
        client.force_login(staff)
        assert client.get("/metrics/").status_code == 200
        client.force_login(operator)  # has the permission, but the setting decides now
        assert client.get("/metrics/").status_code == 403


# --- content --------------------------------------------------------------------------------


def test_metrics_count_the_rows(client, operator):
    odd_queue = 'we"ird\\queue'
    add("queued", run_at=T0 - timedelta(seconds=60))
    add("queued", run_at=T0 - timedelta(seconds=10))
    add("queued", run_at=T0 + timedelta(hours=1))  # not due yet
    add("running", run_at=T0 - timedelta(seconds=20), started_at=T0 - timedelta(seconds=19))
    add("waiting", queue=odd_queue, run_at=T0 - timedelta(seconds=5))
    latencies = [0.5, 2.0, 3.0, 4.0]
    for n, latency in enumerate(latencies[1:]):
        run_at = T0 - timedelta(minutes=10 + n)
        add(
            "succeeded",
            kind="a",
            run_at=run_at,
            started_at=run_at + timedelta(seconds=latency),
            ended_at=T0,
        )
    add(
        "failed",
        kind="a",
        run_at=T0 - timedelta(minutes=3),
        started_at=T0 - timedelta(minutes=3) + timedelta(seconds=0.5),
        ended_at=T0,
    )
    add(
        "succeeded",
        kind="b",
        started_at=T0,
        ended_at=T0,
        run_at=T0 - timedelta(days=1),
        derived=True,
    )  # derived timestamps: left out of the latency
    add("cancelled", kind="b", ended_at=T0)

    client.force_login(operator)
    with time_machine.travel(T0, tick=False):
        text = client.get("/metrics/").content.decode()
    samples = parse(text)

    for name, kind in [
        ("django_jobs_jobs", "gauge"),
        ("django_jobs_oldest_due_age_seconds", "gauge"),
        ("django_jobs_processed_total", "counter"),
        ("django_jobs_pickup_latency_seconds", "summary"),
    ]:
        assert f"# TYPE {name} {kind}\n" in text

    def jobs(queue, state):
        return samples[("django_jobs_jobs", (("queue", queue), ("state", state)))]

    assert jobs("default", "queued") == 3 and jobs("default", "running") == 1
    assert jobs("default", "succeeded") == 4 and jobs("default", "failed") == 1
    assert jobs("default", "cancelled") == 1 and jobs("default", "blocked") == 0
    assert jobs(odd_queue, "waiting") == 1
    assert {
        s
        for (name, labels) in samples
        if name == "django_jobs_jobs"
        for k, s in labels
        if k == "state"
    } == set(JobState.values)
    assert 'queue="we\\"ird\\\\queue"' in text  # label values are escaped

    oldest = {
        dict(labels)["queue"]: v
        for (name, labels), v in samples.items()
        if name == "django_jobs_oldest_due_age_seconds"
    }
    assert oldest == {"default": 60.0, odd_queue: 5.0}

    processed = {
        tuple(v for _, v in labels): n
        for (name, labels), n in samples.items()
        if name == "django_jobs_processed_total"
    }
    assert processed == {
        ("a", "succeeded"): 3,
        ("a", "failed"): 1,
        ("b", "succeeded"): 1,
        ("b", "cancelled"): 1,
    }

    # The running job's 1 s, three succeeded and one failed; not the derived row.
    sample = sorted([1.0, *latencies])
    quantile = {
        dict(labels)["quantile"]: v
        for (name, labels), v in samples.items()
        if name == "django_jobs_pickup_latency_seconds"
    }
    assert quantile == {"0.5": 2.0, "0.95": 4.0, "0.99": 4.0}
    assert samples[("django_jobs_pickup_latency_seconds_count", ())] == len(sample) == 5
    assert samples[("django_jobs_pickup_latency_seconds_sum", ())] == pytest.approx(sum(sample))


def test_an_empty_table_still_exposes_every_metric(client, operator):
    client.force_login(operator)
    text = client.get("/metrics/").content.decode()
    samples = parse(text)
    assert samples[("django_jobs_pickup_latency_seconds_count", ())] == 0
    assert 'django_jobs_pickup_latency_seconds{quantile="0.5"} NaN' in text
    assert "# TYPE django_jobs_jobs gauge" in text


def test_pruning_never_lowers_the_processed_counter(client, operator):
    from django_jobs.engine.maintenance import prune

    for n in range(3):
        add("succeeded", kind="a", ended_at=T0 - timedelta(days=40 + n))
    add("failed", kind="a", ended_at=T0 - timedelta(days=40))
    add("succeeded", kind="a", ended_at=T0)  # recent: kept
    add("cancelled", kind="b", ended_at=T0 - timedelta(days=40))
    client.force_login(operator)

    def processed() -> dict[tuple[str, ...], float]:
        with time_machine.travel(T0, tick=False):
            samples = parse(client.get("/metrics/").content.decode())
        return {
            tuple(v for _, v in labels): n
            for (name, labels), n in samples.items()
            if name == "django_jobs_processed_total"
        }

    before = processed()
    assert before == {("a", "succeeded"): 4, ("a", "failed"): 1, ("b", "cancelled"): 1}
    result = prune("30d", now=T0, batch_size=2)  # several batches: each adds to the tally
    assert result.jobs == 5
    assert Job.objects.count() == 1
    assert processed() == before
    add("succeeded", kind="a", ended_at=T0)
    prune("30d", now=T0)  # nothing old left: the tally stays as it was
    assert processed() == {**before, ("a", "succeeded"): 5}
