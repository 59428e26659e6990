"""The admin and the demo as a new user first meets them (HTML through the test client).

Field labels of the job page, one date format with its time zone on jobs and schedules, the
admin's own page for a member who may not look, ``django.tasks`` jobs named by their task, a
resolve value nested too deeply, the demo's submit endpoint on bad bodies, the demo's kinds
without the test suite's, and the workflow the demo starts with.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from django_jobs.models import Job, JobStep, Schedule
from django_jobs.testing import run_until_idle
from tests.conftest import ROOT

ADMIN = "/admin/django_jobs/"
JOBS = f"{ADMIN}job/"
OVERVIEW = f"{JOBS}overview/"
SCHEDULES = f"{ADMIN}schedule/"
NOW = datetime(2026, 12, 2, 14, 3, 5, tzinfo=UTC)


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def operator(api_users):
    api_users.operator.is_staff = True
    api_users.operator.save()
    return api_users.operator


def signed_in(user, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def field_label(html: str, field: str) -> str:
    """The label the job page shows for the read-only field ``field``."""
    found = re.search(rf"field-{field}\b.*?<label>([^<]*)</label>", html, re.S)
    assert found, f"no field {field} on the page"
    return found.group(1).strip()


# -- 1. labels --------------------------------------------------------------------------------


def test_the_job_page_labels_parent_and_payload_as_such(operator, frozen):
    parent = Job.objects.create(kind="demo.publish", state="waiting", payload={"video": "a"})
    child = Job.objects.create(
        kind="demo.render", state="queued", payload={"video": "a-5"}, parent=parent
    )
    html = signed_in(operator).get(f"{JOBS}{child.pk}/change/").content.decode()
    assert field_label(html, "parent_display") == "Parent:"
    assert field_label(html, "payload_display") == "Payload:"
    assert f'<a href="{JOBS}{parent.pk}/change/">#{parent.pk}</a>' in html


# -- 3. one date format, with the time zone ---------------------------------------------------

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{3,4}")


def test_jobs_and_schedules_show_dates_alike_with_the_time_zone(operator, frozen, settings):
    job = Job.objects.create(
        kind="demo.render",
        state="running",
        created_at=NOW,
        run_at=NOW,
        started_at=NOW,
        leased_until=NOW + timedelta(seconds=30),
        payload={"video": "a"},
    )
    Schedule.objects.create(
        name="nightly",
        cron="0 3 * * *",
        tz="Europe/Paris",
        kind="test.noop",
        next_run_at=NOW,
        last_fired_at=NOW - timedelta(days=1),
        checked_until=NOW,
        created_at=NOW,
    )
    schedule = Schedule.objects.get()
    client = signed_in(operator)

    def text(url: str) -> str:
        return re.sub(r"<[^>]+>", "", client.get(url).content.decode())

    job_list, job_page = text(JOBS), text(f"{JOBS}{job.pk}/change/")
    schedule_list = text(SCHEDULES)
    schedule_page = text(f"{SCHEDULES}{schedule.pk}/change/")
    assert "2026-12-02 14:03:05 UTC" in job_list
    assert "2026-12-02 14:03:05 UTC" in job_page  # created, started
    assert "2026-12-02 14:03:35 UTC" in job_page  # leased until
    assert "2026-12-02 14:03:05 UTC" in schedule_list  # next run
    assert "2026-12-01 14:03:05 UTC" in schedule_list  # last fired
    assert "2026-12-02 14:03:05 UTC" in schedule_page  # checked until, created
    assert "2026-12-03 02:00:00 UTC" in schedule_page  # the next runs: 03:00 in Paris
    for page in (job_list, job_page, schedule_list, schedule_page):
        assert "p.m." not in page and "a.m." not in page  # no second format anywhere

    # Another active time zone: its abbreviation.
    settings.TIME_ZONE = "Europe/Paris"
    assert "2026-12-02 15:03:05 CET" in text(f"{JOBS}{job.pk}/change/")
    assert "2026-12-02 15:03:05 CET" in text(SCHEDULES)


# -- 4. a member who may not look -------------------------------------------------------------


@pytest.mark.parametrize("url", [OVERVIEW, JOBS, SCHEDULES, "job-page"])
def test_a_member_gets_the_admins_own_page_with_a_way_to_sign_in_as_an_operator(api_users, url):
    member = api_users.staff  # staff (the demo's users are), without any jobs permission
    if url == "job-page":
        url = f"{JOBS}{Job.objects.create(kind='demo.hello').pk}/change/"
    response = signed_in(member).get(url)
    assert response.status_code == 403
    html = response.content.decode()
    assert 'id="site-name"' in html  # the admin's own page, with its style sheets
    assert "admin/css/base.css" in html
    assert "You are signed in as <strong>staff</strong>, who may not see" in html
    assert "Sign in as an operator" in html
    # The button signs out, then opens the login page, then this page.
    assert 'action="/admin/logout/"' in html
    assert f'name="next" value="/admin/login/?next={url.replace("/", "%2F")}"' in html
    assert "the operator is <strong>ops</strong>" in html  # the demo's own hint


def test_sign_in_as_an_operator_leads_back_to_the_page(api_users, operator):
    client = signed_in(api_users.staff, enforce_csrf_checks=True)
    page = client.get(OVERVIEW)
    token = page.cookies["csrftoken"].value
    nxt = re.search(r'name="next" value="([^"]+)"', page.content.decode()).group(1)
    response = client.post("/admin/logout/", {"csrfmiddlewaretoken": token, "next": nxt})
    assert response.status_code == 302 and response["Location"] == nxt
    login = client.get(nxt)
    assert login.status_code == 200 and 'name="username"' in login.content.decode()
    response = client.post(
        nxt,
        {
            "username": "operator",
            "password": "pw-operator",
            "csrfmiddlewaretoken": login.cookies["csrftoken"].value,
            "next": OVERVIEW,
        },
    )
    assert response.status_code == 302 and response["Location"] == OVERVIEW
    assert client.get(OVERVIEW).status_code == 200


# -- 5. django.tasks jobs ---------------------------------------------------------------------


def test_a_django_task_job_is_named_by_its_task_and_its_failed_attempts_show_failed(
    operator, frozen
):
    job = Job.objects.create(
        kind="django.tasks",
        state="failed",
        attempts=2,
        max_attempts=2,
        payload={"task": "testproject.tasks.explode", "args": ["boom"], "kwargs": {}},
        error="LookupError: boom",
        created_at=NOW,
        run_at=NOW,
        started_at=NOW,
        ended_at=NOW,
    )
    for seq, (name, value) in enumerate(
        [
            ("attempt-1", {"worker_id": "w1", "started_at": NOW.isoformat()}),
            (
                "error-1",
                {
                    "exception_class_path": "builtins.LookupError",
                    "traceback": "Traceback (most recent call last):\nLookupError: 'boom'\n",
                    "at": NOW.isoformat(),
                },
            ),
        ]
    ):
        JobStep.objects.create(
            job=job, name=name, seq=seq, state="completed", value=value, attempts=1
        )
    client = signed_in(operator)

    listed = client.get(JOBS).content.decode()
    row = re.search(rf"<tr>(?:(?!</tr>).)*?/job/{job.pk}/change/.*?</tr>", listed, re.S).group(0)
    assert "testproject.tasks.explode" in row.replace("<wbr>", "")

    html = client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "testproject.tasks.explode#" in html  # the heading
    assert re.search(r'class="djj-task">testproject.tasks.explode</span>', html)
    steps = html.split('id="djj-steps"')[1]
    trace = dict(re.findall(r'<tr data-step="([^"]+)">.*?djj-state-(\w+)', steps, re.S))
    assert trace == {"attempt-1": "completed", "error-1": "failed"}
    assert "LookupError: &#x27;boom&#x27;" in html  # the failed attempt's error


def test_a_django_task_job_enqueued_through_the_backend_is_named_by_its_task(operator):
    from testproject.tasks import explode

    result = explode.enqueue("boom")
    run_until_idle()
    job = Job.objects.get(pk=result.id)
    html = signed_in(operator).get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "testproject.tasks.explode" in html
    assert re.search(r'<tr data-step="error-1">.*?djj-state-failed', html, re.S)


# -- 6. the heading and the breadcrumb ---------------------------------------------------------


def test_the_breadcrumb_and_the_heading_name_the_same_state(operator, frozen):
    job = Job.objects.create(kind="demo.hello", state="failed", attempts=1, error="boom")
    html = signed_in(operator).get(f"{JOBS}{job.pk}/change/").content.decode()
    crumb = re.search(r'<li aria-current="page" id="djj-crumb" data-djj-live>(.*?)</li>', html)
    heading = re.search(r'<h2 id="djj-subtitle" data-djj-live>(.*?)</h2>', html)
    assert crumb and heading
    assert crumb.group(1) == heading.group(1) == f"demo.hello#{job.pk} (failed)"


# -- 10. resolve with a value nested too deeply -------------------------------------------------


def test_resolve_refuses_a_value_nested_too_deeply_with_a_message(operator, frozen):
    job = Job.objects.create(kind="test.noop", state="unknown", attempts=1, max_attempts=3)
    JobStep.objects.create(job=job, name="charge", seq=1, state="unknown", attempts=1)
    client = signed_in(operator)
    url = f"{JOBS}{job.pk}/resolve/"
    for depth in (65, 100_000):
        value = "[" * depth + "]" * depth
        response = client.post(
            url, {"step": "charge", "as": "completed", "value": value}, follow=True
        )
        assert response.status_code == 200
        html = response.content.decode()
        assert "is nested more than 64 levels deep" in html, depth
        assert Job.objects.get(pk=job.pk).state == "unknown"
        assert JobStep.objects.get(job=job).state == "unknown"
    # 64 levels are a value.
    value = "[" * 64 + "]" * 64
    client.post(url, {"step": "charge", "as": "completed", "value": value})
    assert JobStep.objects.get(job=job).state == "completed"


# -- 9. the demo's submit endpoint ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (b"{bad", "MALFORMED_BODY", "The body is not valid JSON"),
        (b"\xff\xfe", "MALFORMED_BODY", "The body is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "MALFORMED_BODY", "nested too deeply"),
        (b'["intro"]', "INVALID", "The body is JSON list, not an object"),
        (b'"intro"', "INVALID", "The body is JSON str, not an object"),
        (b'{"video": ["a"]}', "INVALID", "fix the fields listed in errors"),
        (b'{"video": "' + b"x" * 101 + b'"}', "INVALID_PAYLOAD", "100"),
    ],
)
def test_demo_submit_answers_a_bad_body_with_a_400_saying_what_is_wrong(
    api_users, body, code, says
):
    response = signed_in(api_users.member).post(
        "/demo/submit/", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    data = response.json()
    assert data["code"] == code and says in data["message"], data
    assert not Job.objects.exists()


def test_demo_submit_names_unknown_fields(api_users):
    client = signed_in(api_users.member)
    response = client.post(
        "/demo/submit/", {"video": "a", "frames": 5, "owner": 1}, content_type="application/json"
    )
    assert response.status_code == 400
    data = response.json()
    assert data["code"] == "INVALID"
    assert set(data["errors"]) == {"frames", "owner"}
    assert "accepts only video" in data["errors"]["frames"][0]
    # A good body still submits.
    response = client.post("/demo/submit/", {"video": "a"}, content_type="application/json")
    assert response.status_code == 201 and response.json()["kind"] == "demo.render"
    assert client.generic("POST", "/demo/submit/", b"").status_code == 201  # no body: a clip


# -- 7. the demo's kinds ---------------------------------------------------------------------


def test_the_demo_registry_holds_the_demo_kinds_and_no_test_kind(tmp_path):
    """The demo's filters, on a new demo database: its kinds, the Django task kind, and its one
    engine; the built-in django_jobs.flow only once a flow exists (the demo makes none)."""
    code = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "from django_jobs.admin.filters import EngineFilter, KindFilter\n"
        "from django_jobs.models import Job\n"
        "print(' '.join(sorted(KindFilter.declared(None))))\n"
        "print(' '.join(sorted(EngineFilter.declared(None))))\n"
        "Job.objects.create(kind='django_jobs.flow', idempotency_key='flow-1')\n"
        "print(' '.join(sorted(KindFilter.declared(None))))\n"
    )
    env = {
        "DJANGO_SETTINGS_MODULE": "testproject.demo_settings",
        "PATH": "/usr/bin:/bin",
        "SQLITE_PATH": str(tmp_path / "demo.sqlite3"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    kinds, engines, with_a_flow = (line.split() for line in done.stdout.splitlines())
    # The demo's own kinds and the Django task kind (built in, and the demo's TASKS use it).
    assert kinds == ["demo.hello", "demo.publish", "demo.render", "django.tasks"]
    assert engines == ["default"]
    assert with_a_flow == [*kinds, "django_jobs.flow"]


def test_the_test_settings_hold_the_demo_and_the_test_kinds():
    from django_jobs.kinds.registry import get

    assert get("demo.render") is not None and get("test.noop") is not None
    from testproject import jobs
    from testproject.demo import jobs as demo_jobs

    assert jobs.render is demo_jobs.render  # still importable from testproject.jobs


# -- 8. the demo starts a workflow ---------------------------------------------------------------


def load_demo_script():
    spec = importlib.util.spec_from_file_location("demo_script", ROOT / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_starts_a_publish_workflow_with_children(api_users, monkeypatch, operator):
    monkeypatch.setenv("DEMO_FRAME_SECONDS", "0")
    demo = load_demo_script()
    jobs = demo.enqueue_jobs(api_users.member)
    kinds = [j.kind for j in jobs]
    assert "demo.publish" in kinds
    parent = next(j for j in jobs if j.kind == "demo.publish")
    run_until_idle()
    parent.refresh_from_db()
    children = Job.objects.filter(parent=parent)
    assert parent.state == "succeeded", parent.error
    assert children.count() == len(demo.DEMO_SIZES)
    assert set(children.values_list("state", flat=True)) == {"succeeded"}
    # Both pages are there to see: the parent lists its children, a child links its parent.
    client = signed_in(operator)
    html = client.get(f"{JOBS}{parent.pk}/change/").content.decode()
    assert 'id="djj-children"' in html
    child = children.first()
    assert (
        f'href="{JOBS}{parent.pk}/change/"'
        in client.get(f"{JOBS}{child.pk}/change/").content.decode()
    )
