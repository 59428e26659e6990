"""The admin's Charts page in headless Chromium, against a real web server, over a week of
seeded rollups: the 1 h, 24 h and 7 d windows each draw every chart; a filter narrows them;
a new rollup shows without a reload when a job event arrives.

Writes ``artifacts/admin/charts-24h.png``; with ``JOBS_DOCS_SCREENSHOT=1`` also
``docs/charts.png`` (the README's and docs/admin.md's picture). Skipped without Playwright or
a Chromium binary.
"""

from __future__ import annotations

import os
import shutil

import pytest
from django.utils import timezone

from django_jobs.models import JobRollup
from testproject.jobs import noop
from tests.conftest import ROOT
from tests.integration.charts_seed import seed_history
from tests.integration.test_admin_browser import (  # noqa: F401 - fixtures
    operator,
    orm,
    page,
    shoot,
    web,
)

pytestmark = [pytest.mark.process, pytest.mark.browser]

DRAWN = ["jobs", "runtime", "pickup", "depth", "oldest"]


def drawn(tab) -> dict[str, list[int]]:
    return tab.evaluate(
        "Object.fromEntries([...document.querySelectorAll('svg[data-chart]')].map("
        "s => [s.dataset.chart, [+s.dataset.buckets, +s.dataset.values, "
        "s.querySelectorAll('polyline, rect, circle').length]]))"
    )


def test_the_charts_page_over_a_week_of_rollups(web, operator, page):  # noqa: F811
    orm(seed_history, timezone.now())
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{web}/admin/login/?next=/admin/django_jobs/job/overview/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_jobs/job/overview/")
    page.click("#djj-charts-link")
    page.wait_for_url("**/admin/django_jobs/job/charts/")

    for window, buckets in (("1h", 60), ("24h", 96), ("7d", 168)):
        page.click(f'a[data-window="{window}"]')
        page.wait_for_url(f"**/charts/?window={window}")
        charts = drawn(page)
        assert list(charts) == DRAWN
        for name, (n, values, marks) in charts.items():
            assert n == buckets and values >= buckets - 2 and marks > 0, (window, name, charts)
        # Laid out two a row, each wide enough to read.
        boxes = page.evaluate(
            "[...document.querySelectorAll('svg[data-chart]')]"
            ".map(s => s.getBoundingClientRect().width)"
        )
        assert min(boxes) > 400, boxes
        if window == "24h":
            shot = shoot(page, "charts-24h")
            if os.environ.get("JOBS_DOCS_SCREENSHOT") == "1":
                shutil.copy(shot, ROOT / "docs" / "charts.png")

    # A filter: one kind's runtime only.
    page.select_option('select[name="kind"]', "shop.sync_stock")
    page.click('#djj-chart-filters input[type="submit"]')
    page.wait_for_url("**kind=shop.sync_stock**")
    legend = page.locator("#djj-chart-runtime .djj-legend").inner_text()
    assert "shop.sync_stock p50" in legend and "shop.send_receipt" not in legend

    # Live: a rollup row of the current hour, and a job event; the bars change, no reload.
    page.click('a[data-window="1h"]')
    page.wait_for_url("**/charts/?window=1h**")
    page.evaluate("window.djjMarker = 1")

    def add_rollup() -> None:
        now = timezone.now().replace(second=0, microsecond=0)
        JobRollup.objects.create(
            minute=now, queue="default", kind="shop.sync_stock", succeeded=4321
        )

    orm(add_rollup)
    orm(noop.enqueue, {"live": 1}, queue="charts-live")
    page.wait_for_function(
        "[...document.querySelectorAll('#djj-chart-jobs rect title')]"
        ".some(t => t.textContent.endsWith('succeeded: 4.3k'))"
    )
    assert page.evaluate("window.djjMarker") == 1  # the same page: swapped in, not reloaded
