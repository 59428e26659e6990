"""The admin is no write door for members: only operators see jobs, and nobody edits a payload."""

from __future__ import annotations

import pytest
from django.test import Client

from django_jobs.kinds.registry import lookup
from django_jobs.models import Job

CHANGELIST = "/admin/django_jobs/job/"


@pytest.fixture
def job(api_users):
    return lookup("demo.hello").as_user(api_users.member, "admin")


@pytest.fixture
def admin_operator(api_users):
    api_users.operator.is_staff = True
    api_users.operator.save()
    return api_users.operator


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_staff_without_the_operator_permission_cannot_see_add_or_change_jobs(api_users, job):
    client = _client(api_users.staff)
    change = f"{CHANGELIST}{job.pk}/change/"
    assert client.get(CHANGELIST).status_code == 403
    assert client.get(f"{CHANGELIST}add/").status_code == 403
    assert client.post(f"{CHANGELIST}add/", {"kind": "test.noop", "payload": "{}"}).status_code == (
        403
    )
    assert client.get(change).status_code == 403
    assert client.post(change, {"payload": '{"evil": true}'}).status_code == 403
    cancel = {"action": "cancel_jobs", "_selected_action": [job.pk]}
    assert client.post(CHANGELIST, cancel).status_code == 403
    job.refresh_from_db()
    assert (job.payload, job.state) == ("admin", "queued")
    assert Job.objects.count() == 1
    assert "django_jobs" not in client.get("/admin/").content.decode()


def test_operators_see_jobs_read_only(admin_operator, job):
    client = _client(admin_operator)
    change = f"{CHANGELIST}{job.pk}/change/"
    assert client.get(CHANGELIST).status_code == 200
    assert client.get(change).status_code == 200  # a read-only view
    assert client.get(f"{CHANGELIST}add/").status_code == 403
    assert client.post(change, {"payload": '{"evil": true}', "state": "succeeded"}).status_code == (
        403
    )
    assert client.post(f"{CHANGELIST}{job.pk}/delete/", {"post": "yes"}).status_code == 403
    job.refresh_from_db()
    assert (job.payload, job.state) == ("admin", "queued")


def test_operators_cancel_and_retry_through_actions(admin_operator, job):
    client = _client(admin_operator)
    response = client.post(CHANGELIST, {"action": "cancel_jobs", "_selected_action": [job.pk]})
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled"
    client.post(CHANGELIST, {"action": "retry_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.state == "queued"
    # A refusal is reported, not raised.
    response = client.post(
        CHANGELIST, {"action": "retry_jobs", "_selected_action": [job.pk]}, follow=True
    )
    assert "only failed, blocked or cancelled jobs can be retried" in response.content.decode()


def test_superusers_are_operators(api_users, job):
    client = _client(api_users.superuser)
    assert client.get(CHANGELIST).status_code == 200
    client.post(CHANGELIST, {"action": "cancel_jobs", "_selected_action": [job.pk]})
    assert Job.objects.get(pk=job.pk).state == "cancelled"
