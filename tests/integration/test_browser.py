"""The demo page in a real browser: a job's progress and end appear live, without polling.

Headless Chromium (Debian's ``chromium``, driven by Playwright) opens ``/`` on a real daphne
as a signed-in member; a worker process runs the jobs. The page loads its list once per
connection of the event stream and then follows the SSE events. A screenshot is kept in
``artifacts/``. The page also takes a member to the operator's sign-in and the admin's queue
overview.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from django_jobs.models import Job
from testproject.jobs import hello
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
            logged = page.locator("tr[data-job] td.log").inner_text()
            page.reload()  # the list is loaded again: the Log column keeps the last line
            page.wait_for_function("document.getElementById('live').textContent === 'live'")
            page.wait_for_selector("tr[data-job] td.state.succeeded")
            reloaded = page.locator("tr[data-job] td.log").inner_text()
            screenshot = ROOT / "artifacts" / "demo-live-events.png"
            screenshot.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            context.close()

    assert 0 < early < final == 100
    assert logged == reloaded == "done"  # demo.render's last line
    job = Job.objects.get()
    assert (job.owner_id, job.state) == (member.pk, "succeeded")
    assert screenshot.stat().st_size > 0
    # One list load for each stream connection (the page, then its reload); everything else
    # came over the stream.
    assert sum("/demo/jobs.json" in url for url in requests) == 2
    assert sum("/api/jobs/events/" in url for url in requests) == 2
    assert sum("/demo/submit/" in url for url in requests) == 1


def test_a_member_switches_to_the_operator_from_the_demo_page(
    chromium, asgi_server, django_user_model, tmp_path
):
    server = asgi_server()
    member = django_user_model.objects.create_user("mia", is_staff=True)
    ops = django_user_model.objects.create_user("ops", password="ops", is_staff=True)
    ops.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    )
    job = hello.as_user(ops, "ops")
    cookie = session_cookie(member)

    with chromium.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            context = browser.new_context()
            context.add_cookies([{"name": "sessionid", "value": cookie, "url": server.base}])
            page = context.new_page()
            page.goto(f"{server.base}/")
            overview = page.locator("#overview-link")
            assert overview.get_attribute("href") == "/admin/django_jobs/job/overview/"
            # The member's page says who may open it, and switches to that user.
            assert "sign in as ops" in page.locator("#operators").inner_text()
            page.screenshot(path=str(ROOT / "artifacts" / "demo-member-page.png"))
            page.click("#operators button")
            page.wait_for_url("**/admin/login/?next=/admin/django_jobs/job/overview/")
            page.fill("#id_username", "ops")
            page.fill("#id_password", "ops")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/django_jobs/job/overview/")
            assert page.locator("#djj-queues").count() == 1
            # Back on the demo page, the operator's view links every job to its admin page.
            page.goto(f"{server.base}/")
            assert "You are an operator" in page.locator("#operators").inner_text()
            link = page.wait_for_selector(f'tr[data-job="{job.pk}"] a')
            assert link.get_attribute("href") == f"/admin/django_jobs/job/{job.pk}/change/"
        finally:
            browser.close()
