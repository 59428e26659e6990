# ruff: noqa: F811 - the fixtures imported from test_admin_browser are parameters here
"""The demo as a new operator first sees it, in headless Chromium at 1280x800: the web server
and the worker run under the demo's own settings (``testproject.demo_settings``, as
``scripts/demo`` starts them).

The job list's filters offer the demo's kinds and its one engine only (no built-in
``django_jobs.flow`` while there are no flows, no test suite's ``fleet`` engine); the publish
workflow's parent, resumed by its gather, shows each of its log lines once; the demo's page and
the app's pages link an icon that loads, and ``/favicon.ico`` leads to it. Skipped without
Playwright or Chromium.
"""

from __future__ import annotations

import pytest

from django_jobs.kinds.registry import lookup
from django_jobs.models import Job
from tests.conftest import wait_until
from tests.integration.test_admin_browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    operator,
    orm,
    page,
    serve,
)
from tests.integration.test_admin_first_look_browser import VIEWPORT, sign_in

pytestmark = [pytest.mark.process, pytest.mark.browser]

DEMO = {"DJANGO_SETTINGS_MODULE": "testproject.demo_settings"}


@pytest.fixture
def demo_web(spawn) -> str:
    """``manage.py runserver`` under the demo's settings, on the test database."""
    return serve(spawn, **DEMO)


def filter_options(page, title: str) -> list[str]:
    return [
        option.strip()
        for option in page.locator(
            f'#changelist-filter details[data-filter-title="{title}"] li a'
        ).all_inner_texts()
    ]


def state_of(pk: int) -> str:
    return orm(lambda: Job.objects.get(pk=pk).state)


def test_the_demo_publish_parent_logs_each_line_once_after_its_resume(
    demo_web, operator, page, spawn
):
    worker = spawn("runjobs", env={**DEMO, "DEMO_FRAME_SECONDS": "0"})
    parent = orm(lookup("demo.publish").enqueue, {"video": "intro", "sizes": [1, 2]})
    page.set_viewport_size(VIEWPORT)
    sign_in(page, demo_web, f"/admin/django_jobs/job/{parent.pk}/change/")
    wait_until(
        lambda: state_of(parent.pk) in ("succeeded", "failed"),
        interval=0.05,
        message=worker.output(),
    )
    page.reload()
    page.wait_for_selector("#djj-fields .djj-state-succeeded")
    shown = [
        line for line in page.locator("#djj-log pre.djj-log").inner_text().splitlines() if line
    ]
    page.screenshot(path=str(ARTIFACTS / "demo-publish-1280x800.png"), full_page=True)

    stored = orm(Job.objects.get, pk=parent.pk)
    children = orm(
        lambda: list(
            Job.objects.filter(parent_id=parent.pk).order_by("pk").values_list("pk", flat=True)
        )
    )
    assert stored.first_started_at < stored.started_at  # started, then resumed by the gather
    jobs = ", ".join(f"#{pk}" for pk in children)
    assert shown == stored.log == [f"rendering intro in 2 sizes: jobs {jobs}", "published intro"]


def icon_loads(page, web: str) -> None:
    """The page links one icon, and it answers 200 with an image."""
    icons = page.locator('link[rel="icon"]')
    assert icons.count() == 1, page.url
    href = icons.get_attribute("href")
    assert href, page.url
    response = page.request.get(f"{web}{href}")
    assert response.status == 200, (page.url, href)
    assert response.headers["content-type"].startswith("image/"), response.headers


def test_the_demo_lists_its_own_kinds_and_engine_and_its_pages_have_an_icon(
    demo_web, operator, page, django_user_model
):
    page.set_viewport_size(VIEWPORT)
    sign_in(page, demo_web, "/admin/django_jobs/job/")
    kinds = filter_options(page, "kind")
    engines = filter_options(page, "engine")
    page.screenshot(path=str(ARTIFACTS / "demo-jobs-1280x800.png"))
    # No django_jobs.flow while there are no flows, none of the test suite's kinds.
    assert kinds == ["All", "demo.hello", "demo.publish", "demo.render", "django.tasks"]
    assert engines == ["All", "default"]  # no "fleet": the test suite's engine
    icon_loads(page, demo_web)

    page.goto(f"{demo_web}/admin/django_jobs/job/workers/")
    icon_loads(page, demo_web)
    page.goto(f"{demo_web}/")  # the demo's own page
    assert page.title() == "django_jobs demo"
    icon_loads(page, demo_web)
    # A browser asks for /favicon.ico where nothing names an icon: it leads to the same icon.
    favicon = page.request.get(f"{demo_web}/favicon.ico")
    assert favicon.status == 200, favicon.url
    assert favicon.url == f"{demo_web}{page.locator('link[rel=icon]').get_attribute('href')}"

    # A staff member who is no operator gets the app's "Operators only" page: it has it too.
    orm(django_user_model.objects.create_user, "sam", password="pw-sam", is_staff=True)
    page.context.clear_cookies()
    page.goto(f"{demo_web}/admin/login/?next=/admin/django_jobs/job/overview/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", "pw-sam")
    page.click("input[type=submit]")
    page.wait_for_selector("#djj-forbidden")
    icon_loads(page, demo_web)
