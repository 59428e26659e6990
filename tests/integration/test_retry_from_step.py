"""``retry`` with ``from_step`` re-runs completed steps: operators only (SPEC §7).

An owner may retry their own job of a member-safe kind, plainly: completed steps replay from
storage. Re-running a completed step repeats its effect (a grant, a charge), which the owner
cannot undo, so a member's ``from_step`` is refused (403) and nothing runs again. The rule
lives in ``django_jobs.permissions.can_retry`` and ``operations.retry`` enforces it for
every surface that names the user (API, admin).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_jobs import Retry, job, operations
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.testing import run_until_idle

pytestmark = pytest.mark.django_db

GRANTS: list[int] = []


@pytest.fixture
def grant_kind() -> Iterator[object]:
    """A member-safe kind whose ``grant`` step has an effect, then fails outside the step."""
    GRANTS.clear()

    @job("credits.grant", idempotency_key="payload", member_safe=True, retry=Retry(attempts=1))
    def grant(ctx):
        ctx.step.run("grant", lambda: GRANTS.append(ctx.job.pk) or len(GRANTS))
        if ctx.payload.get("fail"):
            raise RuntimeError("the receipt could not be sent")
        return {"granted": True}

    yield grant
    unregister("credits.grant")


@pytest.fixture
def failed_grant(grant_kind, api_users) -> Job:
    granted = grant_kind.as_user(api_users.member, {"fail": True})
    run_until_idle()
    granted.refresh_from_db()
    assert granted.state == "failed" and GRANTS == [granted.pk]
    return granted


def retry(client, job: Job, body: dict) -> object:
    return client.post(f"/api/jobs/{job.pk}/retry/", body, format="json")


def test_a_members_retry_from_a_step_is_refused_and_reruns_nothing(
    failed_grant, api_users, api_client
):
    member = api_client(api_users.member)
    for _ in range(3):
        refused = retry(member, failed_grant, {"from_step": "grant"})
        assert refused.status_code == 403
        body = refused.json()
        assert body["code"] == "RETRY_NOT_ALLOWED"
        assert "operators" in body["message"] and "without from_step" in body["message"]
    run_until_idle()
    failed_grant.refresh_from_db()
    assert failed_grant.state == "failed"
    assert list(failed_grant.steps.values_list("name", flat=True)) == ["grant"]
    assert GRANTS == [failed_grant.pk]  # the effect ran once, as before


def test_a_members_from_step_is_refused_before_the_step_is_looked_up(
    failed_grant, api_users, api_client
):
    refused = retry(api_client(api_users.member), failed_grant, {"from_step": "no such step"})
    assert refused.status_code == 403
    assert refused.json()["code"] == "RETRY_NOT_ALLOWED"


def test_an_owners_plain_retry_replays_the_completed_step(failed_grant, api_users, api_client):
    retried = retry(api_client(api_users.member), failed_grant, {})
    assert retried.status_code == 200 and retried.json()["state"] == "queued"
    run_until_idle()
    assert GRANTS == [failed_grant.pk]  # replayed from storage, not run again


def test_an_operators_retry_from_a_step_runs_it_again(failed_grant, api_users, api_client):
    retried = retry(api_client(api_users.operator), failed_grant, {"from_step": "grant"})
    assert retried.status_code == 200
    run_until_idle()
    assert GRANTS == [failed_grant.pk, failed_grant.pk]


def test_operations_enforce_the_rule_for_the_user_they_are_given(failed_grant, api_users):
    from django_jobs import RetryNotAllowed

    with pytest.raises(RetryNotAllowed):
        operations.retry(failed_grant.pk, from_step="grant", by=api_users.member)
    with pytest.raises(RetryNotAllowed):  # not the owner
        operations.retry(failed_grant.pk, by=api_users.other)
    assert Job.objects.get(pk=failed_grant.pk).state == "failed"
    operations.retry(failed_grant.pk, from_step="grant", by=api_users.operator)
    assert Job.objects.get(pk=failed_grant.pk).state == "queued"


def test_the_admin_retries_from_a_step_for_operators(failed_grant, api_users, client):
    from django.contrib.auth.models import Permission

    # Staff with view access to jobs but not the operate permission: the admin refuses.
    api_users.staff.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="view_job")
    )
    client.force_login(api_users.staff)
    url = f"/admin/django_jobs/job/{failed_grant.pk}/retry/"
    assert client.post(url, {"from_step": "grant"}).status_code == 403
    client.force_login(api_users.superuser)
    assert client.post(url, {"from_step": "grant"}).status_code == 302
    run_until_idle()
    assert GRANTS == [failed_grant.pk, failed_grant.pk]
