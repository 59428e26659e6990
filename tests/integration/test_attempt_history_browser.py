"""The admin job page's attempts in headless Chromium: a real web server, a job that failed,
then succeeded. The operator reads both runs (number, outcome, worker, process, the error's
first line) and opens the failure's folded traceback. Skipped without Playwright or Chromium.
"""

from __future__ import annotations

import os

import pytest

from django_jobs.testing import run_until_idle
from testproject.jobs import fails_once
from tests.integration.test_admin_browser import (  # noqa: F401 - fixtures
    orm,
    page,
    shoot,
    web,
)
from tests.integration.test_fleet_admin_browser import operator  # noqa: F401 - fixture

pytestmark = [pytest.mark.process, pytest.mark.browser]


def test_the_job_page_lists_every_attempt_with_its_traceback_folded(
    web,  # noqa: F811
    operator,  # noqa: F811
    page,  # noqa: F811
):
    def failed_then_succeeded() -> int:
        job = fails_once.enqueue({"browser": True})
        run_until_idle()
        return job.pk

    job_id = orm(failed_then_succeeded)
    page.goto(f"{web}/admin/login/?next=/admin/django_jobs/job/{job_id}/change/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url(f"**/admin/django_jobs/job/{job_id}/change/")

    rows = page.locator("#djj-attempts tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).locator("td").all_inner_texts()
    second = rows.nth(1).locator("td").all_inner_texts()
    assert [first[0], first[3], first[4], first[5]] == ["1", "retrying", "inline", str(os.getpid())]
    assert first[6].startswith("ValueError: the first attempt fails")
    assert [second[0], second[3], second[4]] == ["2", "succeeded", "inline"]
    assert second[6] == ""
    assert first[1] != "-" and first[2] != "-" and second[2] != "-"

    # The traceback is folded: hidden until its summary is clicked.
    traceback = rows.nth(0).locator("details.djj-traceback pre")
    assert not traceback.is_visible()
    rows.nth(0).locator("details.djj-traceback summary").click()
    assert traceback.is_visible()
    assert "Traceback (most recent call last)" in traceback.inner_text()
    assert "in fails_once" in traceback.inner_text()
    shoot(page, "job-attempts")
