"""The admin's job list is live (SPEC §18): in headless Chromium, against a real web server.

An operator opens the job list, filtered by a search; a job enqueued by the test that matches
it shows at the top within 2 s without a reload, one that does not match never shows, and a
cancelled job's row changes its state in place. While a row is selected for an action the list
holds still, and catches up once the selection is cleared; "select all" counts the new rows.
Skipped without Playwright or a Chromium binary.
"""

from __future__ import annotations

import time

import pytest

from django_jobs import operations
from django_jobs.models import Job
from testproject.jobs import noop
from tests.integration.test_admin_browser import (  # noqa: F401 - fixtures
    operator,
    orm,
    page,
    shoot,
    web,
)

pytestmark = [pytest.mark.process, pytest.mark.browser]

#: The time a new job has to show on the list, from its enqueue (SPEC §18: "without a reload").
LIVE_MS = 2000
QUEUE = "search-live"  # no worker runs it: the rows stay queued unless the test moves them


def enqueue(batch: int, n: int) -> Job:
    return orm(noop.enqueue, {"batch": batch, "n": n}, queue=QUEUE)


def row(pk: int) -> str:
    return f'#result_list tbody tr:has(a[href*="/job/{pk}/change/"])'


def test_new_and_changed_jobs_show_on_the_list_without_a_reload(
    web,  # noqa: F811
    operator,  # noqa: F811
    page,  # noqa: F811
):
    first = enqueue(7, 1)
    enqueue(8, 1)
    page.goto(f"{web}/admin/login/?next=/admin/django_jobs/job/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_jobs/job/")
    page.goto(f"{web}/admin/django_jobs/job/?q=payload.batch%3D7")
    page.wait_for_function("document.documentElement.dataset.djjLive === 'open'")
    assert page.locator("#djj-live-status").inner_text() == "Live."
    assert page.locator("#result_list tbody tr").count() == 1
    page.evaluate("window.djjSamePage = true")  # gone on a reload

    # A matching job shows at the top within 2 s; one that does not match never shows.
    other = enqueue(8, 2)
    started = time.monotonic()
    new = enqueue(7, 2)
    page.wait_for_selector(row(new.pk), timeout=LIVE_MS)
    shown_after = time.monotonic() - started
    assert shown_after < LIVE_MS / 1000 + 0.5, shown_after  # the enqueue itself included
    top = page.locator("#result_list tbody tr").first
    assert top.locator(f'a[href*="/job/{new.pk}/change/"]').count() == 2  # id, kind
    assert page.locator(row(other.pk)).count() == 0
    assert page.locator("#result_list tbody tr").count() == 2
    assert page.locator("#changelist-search .quiet").inner_text().startswith("2 results")
    assert page.evaluate("window.djjSamePage") is True
    shoot(page, "jobs-live", full_page=False)

    # A changed job: its row's state changes in place.
    orm(operations.cancel, first.pk)
    page.wait_for_selector(f"{row(first.pk)} .djj-state-cancelled", timeout=LIVE_MS)

    # Selected rows hold the list still; clearing the selection catches up.
    page.check(f"{row(new.pk)} input.action-select")
    held = enqueue(7, 3)
    page.wait_for_function(
        "document.getElementById('djj-live-status').textContent.startsWith('Paused')"
    )
    assert page.locator(row(held.pk)).count() == 0
    page.uncheck(f"{row(new.pk)} input.action-select")
    page.wait_for_selector(row(held.pk), timeout=LIVE_MS)
    assert page.locator("#djj-live-status").inner_text() == "Live."

    # "Select all" counts the rows that came after the page loaded.
    page.check("#action-toggle")
    assert page.locator("#result_list tbody input.action-select:checked").count() == 3
    assert page.locator("span.action-counter").inner_text().startswith("3 of 3")
    assert page.evaluate("window.djjSamePage") is True
