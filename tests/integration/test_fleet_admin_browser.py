"""The admin's Workers page and queue pausing in headless Chromium: a real web server, a real
worker running a job.

An operator opens the queue overview, follows its Workers link, reads the worker's row (host,
pid, queues, processes x concurrency, the running job linked to its page, state, version) and
watches a heartbeat age grow without reloading; then pauses a queue from the overview and sees
its badge. Skipped without Playwright or a Chromium binary.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from django_jobs.engine.rows import fleet
from django_jobs.models import Job
from django_jobs.models import Worker as WorkerRow
from testproject.jobs import slow
from tests.conftest import wait_until
from tests.integration.test_admin_browser import (  # noqa: F401 - fixtures
    orm,
    page,
    shoot,
    web,
)
from tests.integration.test_worker_processes import wait_for

pytestmark = [pytest.mark.process, pytest.mark.browser]


@pytest.fixture
def operator(django_user_model, worker_env):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("olga", password="pw-olga", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    )
    return user


def test_the_workers_page_lists_rows_and_their_heartbeat_age_moves_on(
    web,  # noqa: F811
    spawn,
    operator,
    tmp_path,
    page,  # noqa: F811
):
    worker = spawn(
        "runjobs", "--name", "browser-w", "--queues", "live", "--concurrency", "2",
        "--no-scheduler",
    )  # fmt: skip
    done = tmp_path / "done"
    job = orm(slow.enqueue, {"until": str(done), "seconds": 60}, queue="live")
    wait_for(
        lambda: orm(lambda: Job.objects.get(pk=job.pk).state) == "running",
        "the job did not start",
        worker,
    )

    def quiet_worker() -> None:  # gone quiet 20 s ago: its heartbeat ages on the page
        fleet.register("quiet-w", pid=4242, hostname="elsewhere")
        WorkerRow.objects.filter(name="quiet-w").update(
            heartbeat_at=timezone.now() - timedelta(seconds=20)
        )

    orm(quiet_worker)

    page.goto(f"{web}/admin/login/?next=/admin/django_jobs/job/overview/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_jobs/job/overview/")
    page.click("#djj-workers-link")
    page.wait_for_url("**/admin/django_jobs/job/workers/")

    row = page.locator('tr[data-worker="browser-w"]')
    assert row.locator("th").inner_text() == "browser-w"
    assert row.locator("th").get_attribute("title").startswith("Started ")
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == socket.gethostname()
    assert cells[1] == str(worker.popen.pid)
    assert cells[2:5] == ["default", "live", "1 x 2"]
    assert cells[5] == f"#{job.pk}"
    assert row.locator('[data-worker-state="running"]').count() == 1
    href = row.locator(f'a:has-text("#{job.pk}")').get_attribute("href")
    assert href == f"/admin/django_jobs/job/{job.pk}/change/"

    quiet = page.locator('tr[data-worker="quiet-w"] td[data-heartbeat-age]')
    first = float(quiet.get_attribute("data-heartbeat-age"))
    assert 19 <= first < 40 and quiet.inner_text().endswith("s ago")
    # Without reloading: the page re-reads its live part every second.
    page.wait_for_function(
        "(first) => parseFloat(document.querySelector("
        "'tr[data-worker=\"quiet-w\"] td[data-heartbeat-age]').dataset.heartbeatAge) >= first + 1",
        arg=first,
    )
    assert page.evaluate("document.documentElement.dataset.djjRefreshes") is not None
    shoot(page, "workers")

    # Pause a queue from the overview: its badge shows, and the worker hears of it.
    page.goto(f"{web}/admin/django_jobs/job/overview/")
    page.select_option("#djj-pause-queue", "live")
    page.select_option('#djj-pause-form select[name="engine"]', "default")
    page.fill('#djj-pause-form input[name="reason"]', "incident 42")
    page.click('#djj-pause-form input[name="pause"]')
    page.wait_for_selector('tr[data-queue="live"] .djj-paused')
    assert "incident 42" in page.locator('tr[data-queue="live"] th').inner_text()
    assert orm(lambda: sorted(fleet.paused_queues("default"))) == ["live"]
    shoot(page, "overview-paused")
    page.select_option("#djj-pause-queue", "live")
    page.select_option('#djj-pause-form select[name="engine"]', "default")
    page.click('#djj-pause-form input[name="resume"]')
    page.wait_for_selector("text=is resumed")
    assert page.locator('tr[data-queue="live"] .djj-paused').count() == 0
    assert orm(lambda: sorted(fleet.paused_queues("default"))) == []

    done.write_text("done")
    wait_until(lambda: orm(lambda: Job.objects.get(pk=job.pk).state) == "succeeded")
