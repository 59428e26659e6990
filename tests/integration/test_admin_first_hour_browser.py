# ruff: noqa: F811 - the fixtures imported from test_admin_browser are parameters here
"""The admin in headless Chromium at 1280x800: what a new operator noticed in the first hour.

The breadcrumb names the app and the list ("Home > Background jobs > Jobs", not "Jobs >
Jobs"); the kind column is wide enough that no name in a kind is broken; the kind filter does
not offer the built-in ``django_jobs.flow`` while there are no flows; a job that never reported
progress shows no bar (nor "-"), a succeeded one 100 %; yes/no fields are words; the tab's title
follows the job's state live; the app's pages have an icon that loads (no 404 for
``/favicon.ico``); a retried job's page shows its first start and its last, as stored. Skipped
without Playwright or Chromium.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from django_jobs import clock, operations
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job
from tests.conftest import wait_until
from tests.integration.test_admin_browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    operator,
    orm,
    page,
    web,
)
from tests.integration.test_admin_first_look_browser import VIEWPORT, sign_in, wide_rows

pytestmark = [pytest.mark.process, pytest.mark.browser]

#: The clock of the worker of the retried job's test, at its first attempt.
T0 = datetime(2026, 6, 1, 12, 0, 5, tzinfo=UTC)

#: For each kind cell: its content's width, and the width of the widest dot-separated name in
#: it, in the cell's own font (the column holds a name of up to about 10em on one line).
KIND_WIDTHS_JS = """() => {
    const canvas = document.createElement("canvas").getContext("2d");
    return [...document.querySelectorAll("#result_list td.field-kind_display")].map(td => {
        const style = getComputedStyle(td);
        canvas.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
        const parts = td.innerText.trim().split(".").map((p, i, all) =>
            i < all.length - 1 ? p + "." : p);
        const widest = Math.max(...parts.map(p => canvas.measureText(p).width));
        const box = td.getBoundingClientRect();
        const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
        const em = parseFloat(style.fontSize);
        return {text: td.innerText.trim(), content: box.width - padding, widest, em};
    });
}"""


def make(**fields) -> Job:
    defaults = {"engine": "fleet", "max_attempts": 1, "attempts": 1}
    return Job.objects.create(**{**defaults, **fields})


def test_the_job_list_as_a_new_operator_reads_it(web, operator, page, django_user_model):
    orm(wide_rows, django_user_model)  # a crowded list: long kinds, queues, owners, stages
    quiet = orm(make, kind="demo.hello", state="running", idempotency_key="quiet")
    done = orm(
        make,
        kind="billing.reconcile_invoices",
        state="succeeded",
        idempotency_key="done",
        progress={"stage": "starting", "percent": 0},  # reported once, at the start
    )
    page.set_viewport_size(VIEWPORT)
    sign_in(page, web, "/admin/django_jobs/job/")
    page.wait_for_selector("#result_list tbody tr")
    page.screenshot(path=str(ARTIFACTS / "first-hour-jobs-1280x800.png"))

    crumbs = page.locator(".breadcrumbs li").all_inner_texts()
    assert [c.strip() for c in crumbs] == ["Home", "Background jobs", "Jobs"]

    cells = page.evaluate(KIND_WIDTHS_JS)
    assert any(c["text"] == "billing.reconcile_invoices" for c in cells)
    for cell in cells:  # no name of up to 9em broken in two, however crowded the list
        assert cell["content"] + 0.5 >= min(cell["widest"], 9 * cell["em"]), cell

    kinds = page.locator("#changelist-filter a").all_inner_texts()
    assert "demo.hello" in kinds and "django_jobs.flow" not in kinds

    def progress_cell(job: Job):
        return page.locator(
            f'#result_list tr:has(a[href$="/{job.pk}/change/"]) td.field-progress_display'
        )

    assert progress_cell(quiet).inner_text().strip() == ""  # never reported: no bar, no "-"
    assert progress_cell(quiet).locator("progress").count() == 0
    bar = progress_cell(done).locator("progress")
    assert bar.get_attribute("value") == "100"
    assert "100%" in progress_cell(done).inner_text()

    icon = page.locator('link[rel="icon"]').get_attribute("href")
    assert icon and page.request.get(f"{web}{icon}").status == 200


def test_the_job_page_title_and_yes_no_fields(web, operator, page):
    job = orm(
        make,
        kind="demo.hello",
        state="failed",
        error="RuntimeError: boom",
        idempotency_key="title",
    )
    page.set_viewport_size(VIEWPORT)
    sign_in(page, web, f"/admin/django_jobs/job/{job.pk}/change/")
    assert page.title().startswith(f"demo.hello#{job.pk} (failed)")
    crumbs = [c.strip() for c in page.locator(".breadcrumbs li").all_inner_texts()]
    assert crumbs[:3] == ["Home", "Background jobs", "Jobs"], crumbs
    cancel = page.locator(".fieldBox.field-cancel_requested_display > .readonly")
    assert cancel.inner_text() == "no" and cancel.locator("img").count() == 0
    assert page.locator(".field-timestamps_derived_display .readonly").inner_text() == "no"
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    assert icon and page.request.get(f"{web}{icon}").status == 200

    page.wait_for_function("document.documentElement.dataset.djjLive === 'open'")
    orm(operations.retry, job.pk)  # from elsewhere: the CLI, the API, another operator
    page.wait_for_function(f"document.title.startsWith('demo.hello#{job.pk} (queued)')")
    page.screenshot(path=str(ARTIFACTS / "first-hour-job-1280x800.png"))


def test_the_demo_lists_its_own_engine_and_kinds_only() -> None:
    """The demo's settings: one engine (the test suite's "fleet" is not the demo's)."""
    from testproject import demo_settings

    assert set(demo_settings.JOBS["ENGINES"]) == {"default"}
    assert "testproject" not in demo_settings.INSTALLED_APPS


def test_a_retried_job_page_shows_its_first_start_and_its_last(
    web, operator, page, spawn, tmp_path
):
    """A real worker runs a failing job on a clock the test moves (``DJANGO_JOBS_TEST_CLOCK``):
    its first attempt starts at T0, its retry a minute later; the page shows both starts."""
    clock_file = tmp_path / "clock"
    clock.set_file(clock_file, T0)
    with time_machine.travel(T0, tick=False):
        job = orm(lookup("test.fail").enqueue, {"page": "first-and-last"})
    env = {clock.TEST_CLOCK_ENV: str(clock_file), "DJANGO_DEBUG": "1", "JOBS_POLL_INTERVAL": "0.1s"}
    worker = spawn("runjobs", env=env)

    def failed_attempts(n: int) -> bool:  # failed n times, queued for its next attempt
        row = orm(Job.objects.get, pk=job.pk)
        return (row.state, row.attempts) == ("queued", n)

    page.set_viewport_size(VIEWPORT)
    sign_in(page, web, f"/admin/django_jobs/job/{job.pk}/change/")
    wait_until(lambda: failed_attempts(1), interval=0.05, message=worker.output())
    clock.set_file(clock_file, T0 + timedelta(minutes=1))  # past its retry's delay (10 s)
    wait_until(lambda: failed_attempts(2), interval=0.05, message=worker.output())
    page.reload()

    labels = [
        label.strip().rstrip(":").lower()
        for label in page.locator("fieldset label").all_inner_texts()
    ]
    assert "first started" in labels and "last started" in labels, labels
    assert labels.index("first started") < labels.index("last started")

    def shown(field: str) -> str:
        text = page.locator(f".fieldBox.field-{field} > .readonly").inner_text()
        return " ".join(text.split())

    stored = orm(Job.objects.get, pk=job.pk)
    assert (stored.first_started_at, stored.started_at) == (T0, T0 + timedelta(minutes=1))
    assert shown("first_started") == "2026-06-01 12:00:05 UTC"
    assert shown("started") == "2026-06-01 12:01:05 UTC"
