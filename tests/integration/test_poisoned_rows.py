"""A row written by an older version, holding text that is not storable today, never breaks a
read: every surface shows it degraded (its bad characters as escapes) instead of a 500.

Only SQLite can hold such rows (PostgreSQL refuses NUL and lone surrogates), so the rows are
written there with raw SQL, as an older version's plain ``json.dumps`` wrote them.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection

from django_jobs.events.payloads import event_text
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job, JobStep, Schedule

pytestmark = pytest.mark.skipif(
    "os.environ.get('DATABASE_URL')", reason="PostgreSQL cannot hold these rows at all"
)

LONE = "\ud800"
DEEP = json.dumps(json.loads("[" * 950 + "]" * 950))


def poison(job: Job) -> None:
    """Rewrite the job's JSON columns the way an older version stored them."""
    bad = json.dumps({"text": f"lone {LONE}", f"key{LONE}": "nul \x00", "deep": None})
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_jobs_job SET payload = %s, result = %s, log = %s, progress = %s, "
            "captured = %s, state = 'failed', error = %s, attempts = 1 WHERE id = %s",
            [
                bad,
                DEEP,
                json.dumps([f"line {LONE}", "nul \x00"]),
                json.dumps({"stage": f"stage {LONE}", "percent": 5}),
                bad,
                "error with nul \x00",
                job.pk,
            ],
        )
        cursor.execute(
            "INSERT INTO django_jobs_jobstep (job_id, name, seq, key, state, value, attempts) "
            "VALUES (%s, 'step', 0, '', 'completed', %s, 1)",
            [job.pk, json.dumps([LONE])],
        )


@pytest.fixture
def poisoned(api_users):
    job = lookup("demo.hello").as_user(api_users.member, "to be poisoned")
    poison(job)
    schedule = Schedule.objects.create(
        name="poisoned", cron="0 3 * * *", tz="UTC", kind="api.report", owner=api_users.member
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_jobs_schedule SET payload = %s WHERE id = %s",
            [json.dumps({"title": LONE}), schedule.pk],
        )
    return job, schedule


def test_the_api_reads_a_poisoned_row(poisoned, api_users, api_client):
    job, schedule = poisoned
    owner = api_client(api_users.member)
    operator = api_client(api_users.operator)
    other = api_client(api_users.other)
    for client in (owner, operator, other):
        assert client.get("/api/jobs/").status_code == 200
        assert client.get("/api/jobs/schedules/").status_code == 200
    detail = owner.get(f"/api/jobs/{job.pk}/")
    assert detail.status_code == 200
    data = detail.json()
    assert data["payload"]["text"] == "lone \\ud800"
    assert data["payload"]["key\\ud800"] == "nul \\u0000"
    assert isinstance(data["result"], str)  # too deep: shown as its JSON text
    assert data["log"] == ["line \\ud800", "nul \\u0000"]
    assert operator.get(f"/api/jobs/{job.pk}/").status_code == 200
    assert other.get(f"/api/jobs/{job.pk}/").status_code == 404
    listed = owner.get("/api/jobs/schedules/").json()["results"]
    assert listed[0]["payload"] == {"title": "\\ud800"}
    assert owner.get(f"/api/jobs/schedules/{schedule.pk}/").status_code == 200


def test_the_admin_reads_a_poisoned_row(poisoned, admin_client):
    job, schedule = poisoned
    assert admin_client.get("/admin/django_jobs/job/").status_code == 200
    page = admin_client.get(f"/admin/django_jobs/job/{job.pk}/change/")
    assert page.status_code == 200
    assert "lone \\\\ud800" in page.content.decode()  # the escape, JSON-encoded
    assert admin_client.get("/admin/django_jobs/schedule/").status_code == 200
    assert admin_client.get(f"/admin/django_jobs/schedule/{schedule.pk}/change/").status_code == 200


def test_the_cli_reads_a_poisoned_row(poisoned):
    job, _ = poisoned
    for args in (["list"], ["list", "--json"], ["inspect", job.pk], ["inspect", job.pk, "--json"]):
        out = io.StringIO()
        call_command("jobs", *[str(a) for a in args], stdout=out, stderr=io.StringIO())
        out.getvalue().encode()  # printable: no surrogate reaches the terminal


def test_events_and_actions_on_a_poisoned_row(poisoned, api_users, api_client):
    job, _ = poisoned
    row = Job.objects.get(pk=job.pk)
    text = event_text("job.failed", row, datetime(2026, 3, 2, tzinfo=UTC), line=row.log[0])
    text.encode()
    assert JobStep.objects.get(job=row).value == ["\\ud800"]
    operator = api_client(api_users.operator)
    retried = operator.post(f"/api/jobs/{job.pk}/retry/", {}, format="json")
    assert retried.status_code == 200, retried.content
