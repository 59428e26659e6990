# ruff: noqa: F811 - the fixtures imported from test_admin_browser are parameters here
"""The admin in headless Chromium at 1280x800, as a new operator first sees it.

The job list fits the window (every column visible, no horizontal scroll), and the job page's
heading and breadcrumb keep naming the same state while the page follows a retry live.
Screenshots are kept under ``artifacts/admin/``. Skipped without Playwright or Chromium.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_jobs import operations
from django_jobs.models import Job, JobStep
from tests.integration.test_admin_browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    operator,
    orm,
    page,
    web,
)

pytestmark = [pytest.mark.process, pytest.mark.browser]

VIEWPORT = {"width": 1280, "height": 800}

OVERFLOW_JS = """() => {
    const table = document.querySelector("#result_list");
    const results = table.closest(".results");
    const limit = document.documentElement.clientWidth;
    const headers = {};
    for (const th of table.querySelectorAll("thead th")) {
        const box = th.getBoundingClientRect();
        const name = [...th.classList].find(c => c.startsWith("column-")) || th.className;
        headers[name.replace("column-", "")] = {
            left: box.left, right: box.right, width: box.width, text: th.innerText.trim()};
    }
    return {
        limit,
        page_scroll: document.documentElement.scrollWidth,
        results_scroll: results.scrollWidth,
        results_client: results.clientWidth,
        table_right: table.getBoundingClientRect().right,
        headers,
    };
}"""


def sign_in(page, web: str, next_url: str) -> None:
    page.goto(f"{web}/admin/login/?next={next_url}")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}")


def wide_rows(django_user_model) -> None:
    """Rows as wide as the list draws them: long kinds, queues, owners, stages, a task name."""
    now = timezone.now()
    owner = django_user_model.objects.create_user("reporting-service-account-eu")
    rows = []
    for i, state in enumerate(["running", "succeeded", "failed", "queued", "waiting"] * 6):
        started = now - timedelta(minutes=i)
        rows.append(
            Job(
                kind="billing.reconcile_invoices_for_the_month",
                engine="fleet",
                queue="billing-reconciliation-eu-west",
                state=state,
                owner=owner,
                idempotency_key=f"wide-{i}",
                attempts=3,
                max_attempts=10,
                created_at=started - timedelta(days=40),
                run_at=started,
                started_at=None if state in ("queued", "waiting") else started,
                ended_at=now if state in ("succeeded", "failed") else None,
                progress={"stage": "reconciling ledger entries", "percent": 55}
                if state == "running"
                else None,
            )
        )
    rows.append(
        Job(
            kind="django.tasks",
            engine="fleet",
            state="failed",
            idempotency_key="task-1",
            payload={"task": "testproject.tasks.introspect", "args": [], "kwargs": {}},
            attempts=1,
            max_attempts=1,
            created_at=now,
            run_at=now,
            started_at=now,
            ended_at=now,
        )
    )
    Job.objects.bulk_create(rows)
    task = Job.objects.get(kind="django.tasks")
    JobStep.objects.create(
        job=task,
        name="error-1",
        seq=1,
        state="completed",
        attempts=1,
        value={
            "exception_class_path": "builtins.LookupError",
            "traceback": "Traceback (most recent call last):\nLookupError: 'gone'\n",
            "at": now.isoformat(),
        },
    )


def test_the_job_list_fits_a_1280_by_800_window(web, operator, page, django_user_model):
    orm(wide_rows, django_user_model)
    page.set_viewport_size(VIEWPORT)
    sign_in(page, web, "/admin/django_jobs/job/")
    page.wait_for_selector("#result_list tbody tr")
    measured = page.evaluate(OVERFLOW_JS)
    page.screenshot(path=str(ARTIFACTS / "jobs-1280x800.png"))
    # No inner horizontal scroll, nothing right of the window.
    assert measured["results_scroll"] <= measured["results_client"], measured
    assert measured["page_scroll"] <= measured["limit"], measured
    assert measured["table_right"] <= measured["limit"], measured
    headers = measured["headers"]
    for column in ("id", "kind_display", "state_display", "attempts_display", "created", "ended"):
        box = headers[column]
        assert box["width"] > 0 and 0 <= box["left"] and box["right"] <= measured["limit"], (
            column,
            measured,
        )
    for title in ("ATTEMPTS", "CREATED", "ENDED"):
        assert page.get_by_role("columnheader", name=title).is_visible()
    # The task's name is the row's label; on its page, the failed attempt is a red step.
    task = page.locator("#result_list .djj-task")
    assert task.inner_text() == "testproject.tasks.introspect"
    task.click()
    page.wait_for_selector("#djj-steps")
    heading = page.locator("#content h2").first.inner_text()
    assert heading.startswith("testproject.tasks.introspect#")
    badge = page.locator('tr[data-step="error-1"] .djj-badge')
    assert badge.inner_text() == "failed"
    assert badge.evaluate("el => getComputedStyle(el).backgroundColor") == "rgb(185, 28, 28)"
    assert "LookupError" in page.locator('tr[data-step="error-1"] pre.djj-error').inner_text()
    page.screenshot(path=str(ARTIFACTS / "task-job-1280x800.png"), full_page=True)


def test_the_heading_and_the_breadcrumb_follow_a_retry_together(web, operator, page):
    job = orm(
        Job.objects.create,
        kind="demo.hello",
        engine="fleet",
        state="failed",
        attempts=1,
        max_attempts=1,
        error="RuntimeError: boom",
        idempotency_key="retry-me",
    )
    page.set_viewport_size(VIEWPORT)
    sign_in(page, web, f"/admin/django_jobs/job/{job.pk}/change/")
    heading, crumb = page.locator("#content h2").first, page.locator(".breadcrumbs li").last
    assert heading.inner_text() == crumb.inner_text() == f"demo.hello#{job.pk} (failed)"
    page.wait_for_function("document.documentElement.dataset.djjLive === 'open'")

    orm(operations.retry, job.pk)  # from elsewhere: the CLI, the API, another operator
    page.wait_for_function(
        f"document.querySelector('#content h2').innerText.includes('#{job.pk} (queued)')"
    )
    page.screenshot(path=str(ARTIFACTS / "job-retried-1280x800.png"))
    assert crumb.inner_text() == heading.inner_text() == f"demo.hello#{job.pk} (queued)"


def test_a_member_following_the_demo_link_gets_the_admins_page_and_signs_in_as_an_operator(
    web, operator, page, django_user_model
):
    orm(django_user_model.objects.create_user, "mia", password="pw-mia", is_staff=True)
    page.set_viewport_size(VIEWPORT)
    page.goto(f"{web}/admin/login/?next=/")
    page.fill("#id_username", "mia")
    page.fill("#id_password", "pw-mia")
    page.click("input[type=submit]")
    page.wait_for_url(f"{web}/")
    page.click("#overview-link")
    page.wait_for_url("**/admin/django_jobs/job/overview/")
    # The admin's own page, styled: its header bar, the error note, the way on.
    header = page.locator("#header")
    assert header.is_visible()
    assert header.evaluate("el => getComputedStyle(el).backgroundColor") != "rgba(0, 0, 0, 0)"
    assert "who may not see the queue overview" in page.locator(".errornote").inner_text()
    assert "ops" in page.locator("#djj-operator-hint").inner_text()
    page.screenshot(path=str(ARTIFACTS / "member-refused-1280x800.png"))
    page.get_by_role("button", name="Sign in as an operator").click()
    page.wait_for_url("**/admin/login/?next=%2Fadmin%2Fdjango_jobs%2Fjob%2Foverview%2F")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_jobs/job/overview/")
    assert page.locator("#djj-queues").count() == 1
