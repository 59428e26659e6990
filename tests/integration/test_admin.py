"""The admin: queue overview, job list, job page and schedules, over 10,000 jobs.

Every page is rendered for an operator within a fixed query budget, with its numbers checked
against the rows; operators act through ``operations`` (retry, cancel, resolve); a staff user
with Django's view permission but not ``operate_jobs`` looks and is refused every action.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.urls import path

from django_jobs import schedule
from django_jobs.engine.schedules import undeclare
from django_jobs.models import Job, JobStep, Schedule
from django_jobs.observability.stats import throughput
from django_jobs.testing import fire_schedules
from testproject.jobs import noop
from tests.conftest import analyze_as_autovacuum_would

ADMIN = "/admin/django_jobs/"
JOBS = f"{ADMIN}job/"
OVERVIEW = f"{JOBS}overview/"
SCHEDULES = f"{ADMIN}schedule/"
NOW = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)
N_JOBS = 10_000
QUERY_BUDGET = 50

#: A project that routes the admin but not ``django_jobs.urls`` (no event stream).
urlpatterns = [path("admin/", admin.site.urls)]

#: States of the bulk rows, by ``i % 20``.
MIX = ["queued"] * 8 + ["running"] * 2 + ["waiting"] * 2 + ["succeeded"] * 4 + ["failed"] * 2
MIX += ["blocked", "unknown"]
ENDED = ("succeeded", "failed", "cancelled")


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def bulk_row(i: int) -> Job:
    """The ``i``-th of the 10,000 rows: a deterministic mix of queues, states and timestamps."""
    state = MIX[i % len(MIX)]
    created = NOW - timedelta(seconds=N_JOBS - i)
    job = Job(
        kind=("demo.render", "test.noop", "test.record")[i % 3],
        queue="default" if i % 2 == 0 else "media",
        engine="default",
        state=state,
        idempotency_key=f"bulk-{i}",
        payload={"n": i},
        attempts=1 if state not in ("queued", "waiting") else 0,
        max_attempts=3,
        created_at=created,
        run_at=created,
    )
    if state in ("running", "succeeded", "failed", "blocked", "unknown"):
        job.started_at = created + timedelta(milliseconds=i % 100)
    if state == "running":
        job.progress = {"stage": "encoding", "percent": i % 101}
        job.worker_id = "w1"
        job.leased_until = NOW - timedelta(minutes=1) if i % 3 == 0 else NOW + timedelta(minutes=1)
    if state in ENDED:
        job.ended_at = NOW - timedelta(seconds=(i * 7) % 590)
    if state == "waiting":
        job.wait_reason = "waiting for the warehouse"
    if state in ("failed", "blocked", "unknown"):
        job.error = f"{state}: boom {i}"
    return job


@pytest.fixture
def many_jobs(db, frozen):
    rows = [bulk_row(i) for i in range(N_JOBS)]
    for start in range(0, N_JOBS, 2000):
        Job.objects.bulk_create(rows[start : start + 2000])
    # The unfiltered list's count rests on the table's statistics (admin/paginator.py):
    # these rows' own, not what an earlier test left.
    analyze_as_autovacuum_would(Job)
    return rows


@pytest.fixture
def derived_job(many_jobs):
    """The newest row: an imported succeeded job without started/ended timestamps."""
    return Job.objects.create(
        kind="legacy.import", state="succeeded", attempts=1, created_at=NOW - timedelta(hours=1)
    )


@pytest.fixture
def stepped_job(db, frozen):
    """An ``unknown`` job stopped at a step whose effect is uncertain, with a log tail."""
    job = Job.objects.create(
        kind="test.noop",
        state="unknown",
        attempts=1,
        max_attempts=3,
        idempotency_key="stepped",
        payload={"order": 42, "lines": ["a", "b"]},
        error="Uncertain: the provider timed out",
        progress={"stage": "charging", "percent": 60},
        created_at=NOW,
        run_at=NOW,
        started_at=NOW,
        log=[f"line {n}" for n in range(100)],
    )
    JobStep.objects.bulk_create(
        [
            JobStep(
                job=job,
                name="reserve",
                seq=1,
                state="completed",
                value={"ok": True},
                attempts=1,
                started_at=NOW,
                ended_at=NOW,
            ),
            JobStep(
                job=job,
                name="charge",
                seq=2,
                state="unknown",
                attempts=1,
                started_at=NOW,
                error="interrupted: recover='stop'",
            ),
        ]
    )
    return job


@pytest.fixture
def operator(api_users):
    api_users.operator.is_staff = True
    api_users.operator.save()
    return api_users.operator


@pytest.fixture
def viewer(api_users):
    """Staff with Django's view permission on jobs and schedules, not ``operate_jobs``."""
    staff = api_users.staff
    staff.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_jobs", codename__in=["view_job", "view_schedule"]
        )
    )
    return staff


def signed_in(user, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def render(client: Client, url: str, budget) -> tuple[str, int]:
    with budget(QUERY_BUDGET) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode(), len(captured.captured_queries)


def listed(html: str) -> list[int]:
    """The job ids a changelist shows, in order."""
    found = re.findall(r'href="/admin/django_jobs/job/(\d+)/change/', html)
    return list(dict.fromkeys(int(pk) for pk in found))


def cell(html: str, queue: str, state: str) -> int:
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', html, re.S).group(1)
    return int(re.search(rf'data-state="{state}">(?:<a href="[^"]*">)?(\d+)', row).group(1))


# -- pages for an operator, within the query budget -----------------------------------------------


def test_overview_shows_counts_latency_throughput_and_stuck_jobs(
    operator, many_jobs, django_assert_max_num_queries
):
    html, queries = render(signed_in(operator), OVERVIEW, django_assert_max_num_queries)
    print(f"overview: {queries} queries")
    counts = Counter((job.queue, job.state) for job in many_jobs)
    for queue in ("default", "media"):
        for state in set(MIX):
            assert cell(html, queue, state) == counts[queue, state], (queue, state)
        assert cell(html, queue, "total") == sum(n for (q, _), n in counts.items() if q == queue)
    assert cell(html, "", "failed") == sum(n for (_, s), n in counts.items() if s == "failed")
    # The oldest due job of each queue: queued rows are due since their creation.
    oldest = min(j.run_at for j in many_jobs if j.queue == "default" and j.state == "queued")
    age = int((NOW - oldest).total_seconds())
    assert f"{age // 3600}h {age % 3600 // 60}m" in html
    # Pickup latency: the bulk rows started 0..99 ms after they were due.
    assert re.search(r'data-latency="p99">\d+ ms<', html)
    # Throughput: ended rows per minute of the last ten (UTC minutes; the last is "now").
    start = NOW.replace(second=0) - timedelta(minutes=9)
    ended = [j for j in many_jobs if j.state in ENDED and j.ended_at >= start]
    per_minute = Counter(j.ended_at.replace(second=0) for j in ended)
    shown = [int(n) for n in re.findall(r"data-ended>(\d+)<", html)]
    assert shown == [per_minute[start + timedelta(minutes=m)] for m in range(10)]
    assert sum(shown) == len(ended) > 0
    # Needs attention: dead letters, expired leases, blocked, unknown; each links to its list.
    expired = sum(1 for j in many_jobs if j.state == "running" and j.leased_until < NOW)
    for key, count, link in [
        ("failed", counts["default", "failed"] + counts["media", "failed"], "state__exact=failed"),
        ("expired", expired, "lease=expired"),
        ("blocked", counts["default", "blocked"] + counts["media", "blocked"], "blocked"),
        ("unknown", counts["default", "unknown"] + counts["media", "unknown"], "unknown"),
    ]:
        card = re.search(rf'data-attention="{key}">(.*?)</div>', html, re.S).group(1)
        assert f">{count}<" in card and link in card, (key, card)
    # The stuck list: running jobs whose lease ran out.
    html = signed_in(operator).get(f"{JOBS}?lease=expired").content.decode()
    assert f"{expired} jobs" in html
    stuck = set(
        Job.objects.filter(state="running", leased_until__lt=NOW).values_list("pk", flat=True)
    )
    assert len(listed(html)) == min(100, expired) and set(listed(html)) <= stuck


def test_job_list_badges_progress_bars_and_derived_timestamps(
    operator, many_jobs, derived_job, django_assert_max_num_queries
):
    html, queries = render(signed_in(operator), JOBS, django_assert_max_num_queries)
    print(f"job changelist: {queries} queries")
    assert f"{N_JOBS + 1} jobs" in html
    assert '<span class="djj-badge djj-state-running">running</span>' in html
    assert '<span class="djj-badge djj-state-failed">failed</span>' in html
    assert re.search(r'<progress max="100" value="\d+" aria-label="\d+%">', html)
    # Newest first: the derived row leads, its timestamps marked "≈".
    rows = re.findall(r"<tr>.*?</tr>", html.split("<tbody>", 1)[1], re.S)
    assert f"/job/{derived_job.pk}/change/" in rows[0]
    assert rows[0].count("djj-derived") == 2  # created, ended
    assert "≈" in rows[0] and "≈" not in rows[1]
    assert "Queue overview" in html


def test_job_list_filters_and_search(operator, many_jobs, stepped_job):
    client = signed_in(operator)
    media_failed = sum(1 for j in many_jobs if j.queue == "media" and j.state == "failed")
    html = client.get(JOBS, {"queue": "media", "state__exact": "failed"}).content.decode()
    assert f"{media_failed} jobs" in html or f"{media_failed} results" in html
    for query, expected in [
        (f"#{stepped_job.pk}", [stepped_job.pk]),
        ("stepped", [stepped_job.pk]),  # idempotency key
        ("bulk-9999", [Job.objects.get(idempotency_key="bulk-9999").pk]),
    ]:
        html = client.get(JOBS, {"q": query}).content.decode()
        assert listed(html) == expected, query
    mine = Job.objects.create(kind="test.noop", owner=operator, idempotency_key="owned")
    html = client.get(JOBS, {"q": "operator"}).content.decode()
    assert f"/job/{mine.pk}/change/" in html
    html = client.get(JOBS, {"kind": "test.record", "engine": "default"}).content.decode()
    assert f"{sum(1 for j in many_jobs if j.kind == 'test.record')} results" in html


def test_job_page_shows_fields_json_steps_log_and_operator_buttons(
    operator, many_jobs, stepped_job, django_assert_max_num_queries
):
    url = f"{JOBS}{stepped_job.pk}/change/"
    html, queries = render(signed_in(operator), url, django_assert_max_num_queries)
    print(f"job page: {queries} queries")
    assert '<span class="djj-badge djj-state-unknown">unknown</span>' in html
    assert '<progress max="100" value="60"' in html and "charging" in html
    assert "&quot;order&quot;: 42" in html  # pretty JSON, read-only
    assert 'name="payload"' not in html  # no input for it
    assert '<tr data-step="reserve">' in html and '<tr data-step="charge">' in html
    assert "interrupted: recover=&#x27;stop&#x27;" in html
    assert "line 0\n" in html and "line 99\n" in html
    assert f'action="/admin/django_jobs/job/{stepped_job.pk}/resolve/"' in html
    assert 'value="charge"' in html
    assert f'action="/admin/django_jobs/job/{stepped_job.pk}/cancel/"' in html
    assert f"/job/{stepped_job.pk}/retry/" not in html  # unknown: resolve first
    assert "/api/jobs/events/" in html  # live updates over the event stream


def test_schedule_list(operator, db, django_assert_max_num_queries):
    Schedule.objects.bulk_create(
        Schedule(
            name=f"s{i:03}",
            cron="0 3 * * *",
            tz="Europe/Paris",
            kind="test.noop",
            next_run_at=NOW,
            last_fired_at=NOW - timedelta(days=1),
            enabled=i % 2 == 0,
        )
        for i in range(120)
    )
    html, queries = render(signed_in(operator), SCHEDULES, django_assert_max_num_queries)
    print(f"schedule changelist: {queries} queries")
    assert "120 schedules" in html and "s000" in html and "Europe/Paris" in html
    assert "0 3 * * *" in html


def test_pages_follow_the_event_stream_when_it_is_routed(operator, stepped_job):
    client = signed_in(operator)
    # The overview follows every event; a job's page that job's stream only.
    for url, events in (
        (OVERVIEW, "/api/jobs/events/"),
        (f"{JOBS}{stepped_job.pk}/change/", f"/api/jobs/events/?job={stepped_job.pk}"),
    ):
        html = client.get(url).content.decode()
        script = re.search(r"<script src=\"[^\"]*django_jobs/admin_live.js\"[^>]*>", html).group(0)
        assert f'data-events="{events}"' in script and "job.progress" in script
        assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in html
    assert f'data-job="{stepped_job.pk}"' in html


@pytest.mark.urls(__name__)
def test_pages_reload_themselves_without_the_event_stream(operator, stepped_job):
    client = signed_in(operator)
    for url in (OVERVIEW, f"{JOBS}{stepped_job.pk}/change/"):
        html = client.get(url).content.decode()
        assert "admin_live.js" not in html
        assert '<meta http-equiv="refresh" content="5">' in html


def test_the_app_index_links_the_overview(operator, db):
    html = signed_in(operator).get(ADMIN).content.decode()
    assert f'href="{OVERVIEW}"' in html


# -- operator actions on the job page -------------------------------------------------------------


def test_operators_retry_cancel_and_resolve_from_the_job_page(operator, stepped_job):
    client = signed_in(operator, enforce_csrf_checks=True)
    page = f"{JOBS}{stepped_job.pk}/change/"
    token = client.get(page).cookies["csrftoken"].value

    def post(action, **data):
        return client.post(
            f"{JOBS}{stepped_job.pk}/{action}/", {"csrfmiddlewaretoken": token, **data}, follow=True
        )

    # Refused by operations: the message says why and what to do.
    html = post("retry").content.decode()
    assert "is unknown; only failed, blocked or cancelled jobs can be retried" in html
    assert Job.objects.get(pk=stepped_job.pk).state == "unknown"
    html = post("resolve", step="charge", **{"as": "completed"}, value="{bad").content.decode()
    assert "The value is not JSON" in html
    # Resolve the unknown step: the job is queued again.
    response = post("resolve", step="charge", **{"as": "completed"}, value='{"charge": "ch_1"}')
    assert response.redirect_chain[-1][0] == page
    resolved = f"Step &#x27;charge&#x27; of job #{stepped_job.pk} was resolved as completed."
    assert resolved in response.content.decode()
    step = JobStep.objects.get(job=stepped_job, name="charge")
    assert (step.state, step.value) == ("completed", {"charge": "ch_1"})
    assert Job.objects.get(pk=stepped_job.pk).state == "queued"
    # Cancel, then retry from a step.
    post("cancel")
    assert Job.objects.get(pk=stepped_job.pk).state == "cancelled"
    html = post("retry", from_step="charge").content.decode()
    assert "was retried from step &#x27;charge&#x27;" in html
    assert Job.objects.get(pk=stepped_job.pk).state == "queued"
    assert list(JobStep.objects.filter(job=stepped_job).values_list("name", flat=True)) == [
        "reserve"
    ]
    html = post("cancel").content.decode()
    assert "was cancelled" in html
    assert (
        "has already ended (cancelled); there is nothing to cancel."
        in post("cancel").content.decode()
    )
    # POST only, and CSRF-checked.
    assert client.get(f"{JOBS}{stepped_job.pk}/retry/").status_code == 405
    assert client.post(f"{JOBS}{stepped_job.pk}/retry/").status_code == 403
    assert Job.objects.get(pk=stepped_job.pk).state == "cancelled"
    assert client.post(f"{JOBS}999999/retry/", {"csrfmiddlewaretoken": token}).status_code == 404


def test_a_running_job_whose_cancel_was_requested_shows_it_instead_of_the_button(operator, frozen):
    job = Job.objects.create(
        kind="test.noop",
        state="running",
        attempts=1,
        worker_id="host:1:default:abcd1234",
        created_at=NOW,
        run_at=NOW,
        started_at=NOW,
    )
    client = signed_in(operator, enforce_csrf_checks=True)
    page = f"{JOBS}{job.pk}/change/"
    response = client.get(page)
    html = response.content.decode()
    assert f'action="{JOBS}{job.pk}/cancel/"' in html and 'value="Ask to cancel"' in html
    assert 'value="Cancel requested"' not in html

    token = response.cookies["csrftoken"].value
    response = client.post(f"{JOBS}{job.pk}/cancel/", {"csrfmiddlewaretoken": token}, follow=True)

    html = response.content.decode()
    assert f"Job #{job.pk} is running: cancel requested." in html
    # Not offered again: the button says the cancel is requested, and cannot be pressed.
    assert f'action="{JOBS}{job.pk}/cancel/"' not in html and "Ask to cancel" not in html
    button = re.search(r"<input[^>]*value=\"Cancel requested\"[^>]*>", html).group(0)
    assert "disabled" in button
    assert Job.objects.get(pk=job.pk).cancel_requested is True


# -- a staff user with view permission only -------------------------------------------------------


def test_view_only_staff_look_but_cannot_act(viewer, stepped_job):
    failed = Job.objects.create(kind="test.fail", state="failed", attempts=3, error="boom")
    client = signed_in(viewer)
    page = f"{JOBS}{stepped_job.pk}/change/"
    assert client.get(OVERVIEW).status_code == 200
    assert client.get(JOBS).status_code == 200
    html = client.get(page).content.decode()
    assert "&quot;order&quot;: 42" in html
    assert "/resolve/" not in html and "/cancel/" not in html and "/retry/" not in html
    assert "Retry the selected jobs" not in client.get(JOBS).content.decode()
    for pk, action, data in [
        (failed.pk, "retry", {}),
        (stepped_job.pk, "cancel", {}),
        (stepped_job.pk, "resolve", {"step": "charge", "as": "completed", "value": "1"}),
    ]:
        assert client.post(f"{JOBS}{pk}/{action}/", data).status_code == 403
    for pk, action in [(failed.pk, "retry_jobs"), (stepped_job.pk, "cancel_jobs")]:
        client.post(JOBS, {"action": action, "_selected_action": [pk]})
    # No edit, no add, no delete.
    assert client.post(page, {"payload": '{"evil": true}', "state": "succeeded"}).status_code == (
        403
    )
    assert client.get(f"{JOBS}add/").status_code == 403
    assert client.post(f"{JOBS}add/", {"kind": "test.noop", "payload": "{}"}).status_code == 403
    assert client.post(f"{page[:-7]}delete/", {"post": "yes"}).status_code == 403
    stepped_job.refresh_from_db()
    assert (stepped_job.state, stepped_job.payload["order"]) == ("unknown", 42)
    assert JobStep.objects.get(job=stepped_job, name="charge").state == "unknown"
    assert Job.objects.get(pk=failed.pk).state == "failed"
    assert Job.objects.count() == 2


def test_view_only_staff_cannot_add_change_or_pause_schedules(viewer, db):
    row = Schedule.objects.create(name="nightly", cron="0 3 * * *", tz="UTC", kind="test.noop")
    client = signed_in(viewer)
    assert client.get(SCHEDULES).status_code == 200
    assert "Pause the selected schedules" not in client.get(SCHEDULES).content.decode()
    client.post(SCHEDULES, {"action": "pause_schedules", "_selected_action": [row.pk]})
    assert (
        client.post(
            f"{SCHEDULES}{row.pk}/change/",
            {
                "name": "x",
                "cron": "* * * * *",
                "tz": "UTC",
                "kind": "test.noop",
                "catch_up": "skip",
            },
        ).status_code
        == 403
    )
    assert client.post(f"{SCHEDULES}add/", {"name": "y"}).status_code == 403
    assert client.post(f"{SCHEDULES}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    row.refresh_from_db()
    assert (row.name, row.cron, row.enabled) == ("nightly", "0 3 * * *", True)
    assert Schedule.objects.count() == 1


def test_staff_without_any_permission_see_nothing(api_users, db):
    client = signed_in(api_users.staff)
    assert client.get(OVERVIEW).status_code == 403
    assert client.get(SCHEDULES).status_code == 403


# -- schedules ------------------------------------------------------------------------------------


def form(**fields):
    return {
        "name": "nightly",
        "cron": "0 3 * * *",
        "tz": "Europe/Paris",
        "kind": "test.noop",
        "payload": "null",
        "catch_up": "skip",
        "enabled": "on",
        "owner": "",
        **fields,
    }


def test_schedule_form_checks_cron_tz_kind_and_payload(operator, frozen):
    client = signed_in(operator)
    for fields, message in [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "never"),
        ({"tz": "Bogota"}, "America/Bogota"),
        ({"kind": "nope.kind"}, "No job kind &#x27;nope.kind&#x27; is registered"),
        ({"kind": "demo.render", "payload": '{"frames": 0}'}, "frames"),
    ]:
        response = client.post(f"{SCHEDULES}add/", form(**fields))
        assert response.status_code == 200, fields
        errors = "".join(
            re.findall(r'<ul class="errorlist.*?</ul>', response.content.decode(), re.S)
        )
        assert message in errors, (fields, errors)
    assert Schedule.objects.count() == 0
    response = client.post(f"{SCHEDULES}add/", form(cron="@daily"))
    assert response.status_code == 302
    row = Schedule.objects.get(name="nightly")
    assert row.cron == "0 0 * * *" and row.checked_until == NOW
    assert row.next_run_at == datetime(2026, 3, 2, 23, 0, tzinfo=UTC)  # midnight in Paris


def test_schedule_form_judges_name_and_payload_size_as_the_api_does(operator, frozen, settings):
    """The form's checks are the schedule service's: the same rules, the same messages."""
    settings.JOBS = {**settings.JOBS, "MAX_PAYLOAD_BYTES": 50}
    client = signed_in(operator)
    for fields, message in [
        ({"name": "a\x07b"}, "The schedule name holds the character U+0007"),
        ({"payload": '{"pad": "' + "x" * 60 + '"}'}, "bytes as JSON; the limit is 50"),
    ]:
        response = client.post(f"{SCHEDULES}add/", form(**fields))
        errors = "".join(
            re.findall(r'<ul class="errorlist.*?</ul>', response.content.decode(), re.S)
        )
        assert message in errors, (fields, errors)
    assert Schedule.objects.count() == 0


def test_resume_refuses_a_schedule_whose_kind_is_gone(operator, frozen):
    row = Schedule.objects.create(
        name="orphan", cron="0 3 * * *", tz="UTC", kind="gone.kind", enabled=False
    )
    client = signed_in(operator)
    response = client.post(
        SCHEDULES, {"action": "resume_schedules", "_selected_action": [row.pk]}, follow=True
    )
    html = response.content.decode()  # the admin capitalizes a message
    assert "Orphan: No job kind &#x27;gone.kind&#x27; is registered" in html
    assert "0 schedule(s) resumed." in html
    assert Schedule.objects.get(pk=row.pk).enabled is False


def test_pause_and_resume_schedules(operator, frozen):
    rows = [
        Schedule.objects.create(
            name=n,
            cron="*/5 * * * *",
            tz="UTC",
            kind="test.noop",
            next_run_at=NOW + timedelta(minutes=5),
            checked_until=NOW,
        )
        for n in ("a", "b")
    ]
    client = signed_in(operator)
    pks = [r.pk for r in rows]
    client.post(SCHEDULES, {"action": "pause_schedules", "_selected_action": pks})
    assert list(Schedule.objects.values_list("enabled", "next_run_at")) == [(False, None)] * 2
    frozen.shift(timedelta(hours=1))
    assert fire_schedules() == []
    client.post(SCHEDULES, {"action": "resume_schedules", "_selected_action": pks})
    later = NOW + timedelta(hours=1)
    assert (
        list(Schedule.objects.values_list("enabled", "next_run_at", "checked_until"))
        == [(True, datetime(2026, 3, 2, 13, 5, tzinfo=UTC), later)] * 2
    )
    frozen.shift(timedelta(minutes=5))
    assert len(fire_schedules()) == 2  # the paused hour is not "missed"


def test_a_paused_declared_schedule_stays_paused_through_sync(operator, frozen):
    schedule("admin-declared", cron="* * * * *", tz="UTC", job=noop)
    try:
        fire_schedules()
        row = Schedule.objects.get(name="admin-declared")
        client = signed_in(operator)
        client.post(SCHEDULES, {"action": "pause_schedules", "_selected_action": [row.pk]})
        frozen.shift(timedelta(minutes=3))
        assert fire_schedules() == []
        row.refresh_from_db()
        assert not row.enabled
        # Its code fields are read-only here, and it cannot be deleted (it would come back).
        html = client.get(f"{SCHEDULES}{row.pk}/change/").content.decode()
        assert 'name="cron"' not in html and 'name="enabled"' in html
        assert client.post(f"{SCHEDULES}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    finally:
        undeclare("admin-declared")


# -- stats helpers --------------------------------------------------------------------------------


def test_throughput_counts_ended_jobs_per_utc_minute(db, frozen):
    def ended(seconds_ago: float, state: str = "succeeded", derived: bool = False) -> None:
        Job.objects.create(
            kind="test.noop",
            state=state,
            ended_at=NOW - timedelta(seconds=seconds_ago),
            timestamps_derived=derived,
        )

    ended(0), ended(29, "failed"), ended(31), ended(60 * 9 + 29, "cancelled")
    ended(60 * 9 + 31)  # before the first minute of the window (11:51)
    ended(5, derived=True)  # an estimate: not counted
    flow = throughput(10)
    assert [b["ended"] for b in flow["minutes"]] == [1, 0, 0, 0, 0, 0, 0, 0, 1, 2]
    assert flow["minutes"][-1] == {
        "minute": "2026-03-02T12:00:00+00:00",
        "succeeded": 1,
        "failed": 1,
        "cancelled": 0,
        "ended": 2,
    }
    assert flow["minutes"][0]["cancelled"] == 1 and flow["per_minute"] == 0.4


def test_a_big_unfiltered_job_list_shows_the_planners_estimate_not_a_count(
    operator, many_jobs, monkeypatch
):
    """COUNT(*) reads a whole PostgreSQL table: above the threshold the unfiltered list shows
    the planner's row estimate; filtered lists, and small tables, are counted exactly."""
    from django.test.utils import CaptureQueriesContext

    from django_jobs.admin import paginator
    from django_jobs.store import get_store

    if not get_store().estimates_row_counts:
        pytest.skip("SQLite counts rows from its own b-tree; every list is counted exactly")
    with connection.cursor() as cursor:
        # many_jobs analyzed the table, this transaction's rows included.
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'django_jobs_job'")
        (estimate,) = cursor.fetchone()
    assert estimate > 0
    client = signed_in(operator)

    def counts(params: dict[str, str]) -> tuple[str, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            html = client.get(JOBS, params).content.decode()
        counted = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
        return html, counted

    html, counted = counts({})
    assert counted and f"{N_JOBS} jobs" in html  # a small table: the exact count
    monkeypatch.setattr(paginator, "EXACT_COUNT_BELOW", 1000)
    html, counted = counts({})
    assert counted == [] and f"{estimate} jobs" in html
    failed = sum(1 for j in many_jobs if j.state == "failed")
    html, counted = counts({"state__exact": "failed"})
    assert counted and (f"{failed} jobs" in html or f"{failed} results" in html)
