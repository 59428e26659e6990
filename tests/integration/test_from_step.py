"""``retry(from_step=...)`` of a step the job does not have: one check (``operations``), one
message, on every surface (SPEC §7, §9).

``operations.check_from_step`` refuses the unknown step with ``UnknownStep`` (a
``NotRetryable``), naming the job's steps in the order they ran and what to do next. The API
answers its 400 with the message under ``errors.from_step``; ``manage.py jobs retry`` exits
with ``EXIT_REFUSED`` and prints it; the admin shows it on the job's page; the MCP tool raises
it. The job and its steps are left as they were.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import Retry, job, mcp_server, operations
from django_jobs.cli import EXIT_REFUSED
from django_jobs.exceptions import NotRetryable, UnknownStep
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobStep
from django_jobs.printable import printable
from django_jobs.testing import run_until_idle

pytestmark = pytest.mark.django_db

STEPS = ("reserve", "charge", "ship")


@pytest.fixture
def three_steps() -> Iterator[object]:
    """A kind that completes three steps, then fails outside them."""

    @job("from_step.order", idempotency_key="payload", retry=Retry(attempts=1))
    def order(ctx):
        for name in STEPS:
            ctx.step.run(name, lambda step=name: step)
        raise RuntimeError("the confirmation could not be sent")

    yield order
    unregister("from_step.order")


@pytest.fixture
def failed(three_steps) -> Job:
    row = three_steps.enqueue({"order": 1})
    run_until_idle()
    row.refresh_from_db()
    assert row.state == "failed"
    return row


def expected(row: Job, step: str) -> str:
    return (
        f"Job #{row.pk} has no step {step!r}; its steps, in the order they ran: 'reserve', "
        "'charge', 'ship'. Retry from one of them, or without from_step."
    )


def untouched(row: Job) -> None:
    after = Job.objects.get(pk=row.pk)
    assert (after.state, after.error, after.max_attempts) == (
        row.state,
        row.error,
        row.max_attempts,
    )
    names = list(JobStep.objects.filter(job=row).order_by("seq").values_list("name", flat=True))
    assert names == list(STEPS)


def test_operations_refuses_an_unknown_step_naming_the_steps(failed):
    with pytest.raises(UnknownStep) as refusal:
        operations.retry(failed.pk, from_step="pack")
    assert refusal.value.message == expected(failed, "pack")
    assert (refusal.value.step, refusal.value.steps) == ("pack", list(STEPS))
    assert isinstance(refusal.value, NotRetryable)  # callers catching NotRetryable still do
    untouched(failed)


def test_a_known_step_is_forgotten_with_the_ones_after_it(failed):
    forgotten = operations.check_from_step(failed, "charge")
    assert [s.name for s in forgotten] == ["charge", "ship"]
    operations.retry(failed.pk, from_step="charge")
    assert list(JobStep.objects.filter(job=failed).values_list("name", flat=True)) == ["reserve"]


def test_a_job_without_steps_says_to_retry_without_from_step(db):
    from testproject.jobs import always_fail

    row = always_fail.enqueue({"pad": 2})
    with pytest.raises(UnknownStep) as refusal:
        operations.check_from_step(row, "any")
    assert refusal.value.message == (
        f"Job #{row.pk} has no step 'any'; it has no stored steps. Retry it without from_step."
    )


def test_the_state_is_judged_before_the_step(three_steps):
    queued = three_steps.enqueue({"order": 2})  # never ran: queued, not retryable
    with pytest.raises(NotRetryable) as refusal:
        operations.retry(queued.pk, from_step="pack")
    assert not isinstance(refusal.value, UnknownStep)
    assert "only failed, blocked or cancelled jobs can be retried" in refusal.value.message


def test_the_api_answers_400_with_the_message_on_from_step(failed, api_users, api_client):
    operator = api_client(api_users.operator)
    response = operator.post(f"/api/jobs/{failed.pk}/retry/", {"from_step": "pack"}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "code": "INVALID",
        "message": "The request is invalid: fix the fields listed in errors and send it again.",
        "errors": {"from_step": [expected(failed, "pack")]},
    }
    untouched(failed)


def test_the_cli_exits_refused_with_the_message(failed):
    with pytest.raises(CommandError) as refusal:
        call_command("jobs", "retry", str(failed.pk), "--from-step", "pack")
    assert refusal.value.returncode == EXIT_REFUSED
    assert str(refusal.value) == printable(f"NOT_RETRYABLE: {expected(failed, 'pack')}")
    untouched(failed)


def test_the_admin_shows_the_message(failed, api_users, client):
    client.force_login(api_users.superuser)
    page = client.post(
        f"/admin/django_jobs/job/{failed.pk}/retry/", {"from_step": "pack"}, follow=True
    )
    shown = [
        unescape(m) for m in re.findall(r'<li class="error">(.*?)</li>', page.content.decode())
    ]
    assert shown == [expected(failed, "pack")]
    untouched(failed)


def test_the_mcp_tool_raises_the_same_refusal(failed):
    with pytest.raises(UnknownStep) as refusal:
        mcp_server.retry(failed.pk, from_step="pack")
    assert refusal.value.message == expected(failed, "pack")
    untouched(failed)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(step=st.text(min_size=1, max_size=40).filter(lambda s: s not in STEPS))
def test_any_other_name_is_refused_with_the_steps_listed(failed, step):
    with pytest.raises(UnknownStep) as refusal:
        operations.retry(failed.pk, from_step=step)
    assert refusal.value.message == expected(failed, step)
    untouched(failed)
