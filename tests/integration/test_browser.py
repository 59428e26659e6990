"""The demo page in a real browser: a job's progress and end appear live, without polling.

Headless Chromium (Debian's ``chromium``, driven by Playwright) opens ``/`` on a real daphne
as a signed-in member; a worker process runs the jobs. The page loads its list once per
connection of the event stream and then follows the SSE events. A screenshot is kept in
``artifacts/``.
"""

from __future__ import annotations

import pytest

from django_jobs.models import Job
from tests.chromium import FLAGS, chromium_path
from tests.conftest import ROOT, session_cookie

pytestmark = [pytest.mark.process, pytest.mark.browser]

CHROMIUM = chromium_path()
PERCENT = "document.querySelector('tr[data-job] .pct')?.textContent"


@pytest.fixture
def chromium():
    if CHROMIUM is None:
        pytest.skip("no chromium binary: apt-get install chromium (Debian) to run browser tests")
    return pytest.importorskip("playwright.sync_api")


def test_the_demo_page_shows_progress_and_the_end_live_without_polling(
    chromium, spawn, asgi_server, django_user_model, tmp_path
):
    spawn("runjobs", env={"DEMO_FRAME_SECONDS": "0.1"})  # 20 frames: about 2 s a job
    server = asgi_server()
    member = django_user_model.objects.create_user("mia")
    cookie = session_cookie(member)

    with chromium.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh user-data-dir
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
        )
        try:
            context.add_cookies([{"name": "sessionid", "value": cookie, "url": server.base}])
            page = context.new_page()
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(f"{server.base}/")
            page.wait_for_function("document.getElementById('live').textContent === 'live'")
            assert page.locator("tr[data-job]").count() == 0

            page.click("#submit")
            # A percentage between the first and the last appears, then the end.
            page.wait_for_function(
                f"(() => {{ const p = parseInt({PERCENT}); return p > 0 && p < 100; }})()"
            )
            early = int(page.evaluate(PERCENT).rstrip("%"))
            page.wait_for_selector("tr[data-job] td.state.succeeded", timeout=30_000)
            final = int(page.evaluate(PERCENT).rstrip("%"))
            screenshot = ROOT / "artifacts" / "demo-live-events.png"
            screenshot.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            context.close()

    assert 0 < early < final == 100
    job = Job.objects.get()
    assert (job.owner_id, job.state) == (member.pk, "succeeded")
    assert screenshot.stat().st_size > 0
    # One list load for the one stream connection; everything after came over the stream.
    assert sum("/demo/jobs.json" in url for url in requests) == 1
    assert sum("/api/jobs/events/" in url for url in requests) == 1
    assert sum("/demo/submit/" in url for url in requests) == 1
