"""The admin in headless Chromium: a real web server, a real worker, live events.

An operator signs in through the login form, reads the queue overview, watches a job run on
its page (the page follows the job's events), resolves an unknown step, and reads the job
list. Screenshots are saved under ``artifacts/admin/`` for a human to look at. Another test
checks that the overview fits a 1280 px wide screen (``artifacts/admin-overview-1280.png``).

Needs Playwright's Python package and a Chromium binary (``chromium`` on the PATH, or the
``CHROMIUM`` environment variable); the test is skipped without them.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.db import connections
from django.utils import timezone

from django_jobs.models import Job, JobStep
from testproject.jobs import count_to_100
from tests.chromium import FLAGS, chromium_path
from tests.conftest import ROOT, free_port, wait_until

pytestmark = [pytest.mark.process, pytest.mark.browser]
sync_api = pytest.importorskip("playwright.sync_api")

ARTIFACTS = ROOT / "artifacts" / "admin"
WAIT_MS = 30_000


def serve(spawn, **env: str) -> str:
    """``manage.py runserver`` (daphne, serving the static files) on a free port, with ``env``
    over the test database's environment (``DJANGO_SETTINGS_MODULE``: the demo's settings)."""
    port = free_port()
    server = spawn("runserver", "--noreload", f"127.0.0.1:{port}", env=env)

    def accepting() -> bool:
        if server.popen.poll() is not None:
            raise AssertionError(f"the server exited early:\n{server.output()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return False
        return True

    wait_until(accepting, timeout=60, message="the web server did not start listening")
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def web(spawn) -> str:
    """``manage.py runserver`` under the test settings."""
    return serve(spawn)


@pytest.fixture
def worker(spawn):
    """A worker on the "live" queue only: the rows made below stay as they are."""
    return spawn("runjobs", "--queues", "live", "--no-scheduler")


@pytest.fixture
def page():
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium: install it, or point CHROMIUM at its binary")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            browser.close()


@pytest.fixture
def operator(django_user_model, worker_env):
    user = django_user_model.objects.create_user("olga", password="pw-olga", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    )
    return user


@pytest.fixture
def queue_rows(worker_env) -> dict[str, Job]:
    """A queue with some history, on the "fleet" engine (the worker leaves it alone)."""
    now = timezone.now()
    rows: list[Job] = []

    def add(state: str, n: int, kind: str = "report.build", **fields) -> None:
        for i in range(n):
            created = now - timedelta(minutes=30, seconds=i)
            job = Job(
                kind=kind,
                engine="fleet",
                state=state,
                created_at=created,
                run_at=created,
                idempotency_key=f"{state}-{i}-{n}",
                payload={"report": i},
                max_attempts=3,
                **fields,
            )
            if state != "queued":
                job.attempts = 1
                job.started_at = created + timedelta(milliseconds=40 + 7 * i)
            if state in ("succeeded", "failed", "cancelled"):
                job.ended_at = now - timedelta(seconds=15 * i + 5)
            rows.append(job)

    add("queued", 18, queue="default")
    add("queued", 7, queue="media", kind="video.transcode")
    add(
        "running",
        3,
        queue="media",
        kind="video.transcode",
        worker_id="w1",
        leased_until=now + timedelta(minutes=5),
        progress={"stage": "encoding", "percent": 55},
    )
    add(
        "running",
        1,
        queue="default",
        worker_id="w-gone",
        leased_until=now - timedelta(minutes=2),
        progress={"stage": "rendering", "percent": 20},
    )
    add("waiting", 2, queue="default", wait_reason="waiting for the warehouse")
    add("succeeded", 30, queue="default", progress={"stage": "done", "percent": 100})
    add("failed", 4, queue="media", kind="video.transcode", error="RuntimeError: codec missing")
    add("blocked", 1, queue="default", error="Blocked: the report template is missing")
    add("cancelled", 2, queue="default")
    Job.objects.bulk_create(rows)
    derived = Job.objects.create(
        kind="legacy.import",
        engine="fleet",
        state="succeeded",
        attempts=1,
        created_at=now - timedelta(hours=2),
    )
    stuck = Job.objects.create(
        kind="billing.charge",
        engine="fleet",
        state="unknown",
        attempts=1,
        max_attempts=3,
        idempotency_key="invoice-1042",
        payload={"invoice": 1042, "amount": "19.90"},
        error="Uncertain: the payment provider timed out; the charge may have happened",
        progress={"stage": "charging", "percent": 60},
        created_at=now,
        run_at=now,
        started_at=now,
        log=[f"step {n}: ok" for n in range(1, 6)] + ["charging card…"],
    )
    JobStep.objects.bulk_create(
        [
            JobStep(
                job=stuck,
                name="reserve",
                seq=1,
                state="completed",
                value={"ok": True},
                attempts=1,
                started_at=now,
                ended_at=now,
            ),
            JobStep(
                job=stuck,
                name="charge",
                seq=2,
                state="unknown",
                attempts=1,
                started_at=now,
                error="Interrupted by a crash (recover='stop'): check the provider.",
            ),
        ]
    )
    return {"derived": derived, "stuck": stuck}


def orm(fn, *args, **kwargs):
    """Run ``fn`` on a thread of its own: Playwright's sync API keeps an event loop on this one,
    where Django refuses database calls."""

    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def shoot(page, name: str, *, full_page: bool = True) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def count(page, queue: str, state: str) -> str:
    return page.locator(f'tr[data-queue="{queue}"] td[data-state="{state}"]').inner_text().strip()


def test_an_operator_watches_the_queue_and_a_job_live(
    web, worker, operator, queue_rows, tmp_path, page
):
    # Sign in through the login form.
    page.goto(f"{web}/admin/login/?next=/admin/django_jobs/job/overview/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_jobs/job/overview/")

    # The overview: counts per queue and state, stuck jobs, latency, throughput.
    assert count(page, "default", "queued") == "18"
    assert count(page, "media", "running") == "3"
    assert count(page, "media", "failed") == "4"
    assert count(page, "default", "succeeded") == "31"  # and the imported one
    cards = {
        key: page.locator(f'[data-attention="{key}"] .djj-card-count').inner_text()
        for key in ("failed", "expired", "blocked", "unknown")
    }
    assert cards == {"failed": "4", "expired": "1", "blocked": "1", "unknown": "1"}
    assert page.locator('[data-latency="p50"]').inner_text().endswith("ms")
    ended = sum(int(t) for t in page.locator("#djj-throughput td[data-ended]").all_inner_texts())
    assert ended == 36  # 30 succeeded, 4 failed, 2 cancelled, all in the last ten minutes
    page.wait_for_function("document.documentElement.dataset.djjLive === 'open'")
    assert page.locator("#djj-live-status").inner_text() == "Live."
    shoot(page, "overview")

    # A job starts on the "live" queue: the overview follows its events.
    go = tmp_path / "go"
    job = orm(count_to_100.enqueue, {"pause": 0.05, "until": str(go), "hold_at": 50}, queue="live")
    page.wait_for_selector('tr[data-queue="live"]')
    page.wait_for_function(
        """() => {
            const cell = document.querySelector('tr[data-queue="live"] td[data-state="running"]');
            return cell && cell.innerText.trim() === "1";
        }"""
    )
    shoot(page, "overview-live")

    # Its page: running at 50%, then it goes on and the page follows it to the end.
    page.goto(f"{web}/admin/django_jobs/job/{job.pk}/change/")
    page.wait_for_selector('#djj-fields progress[value="50"]')
    assert page.locator("#djj-fields .djj-badge").first.inner_text() == "running"
    page.wait_for_function("document.documentElement.dataset.djjLive === 'open'")
    assert page.locator("input[value='Ask to cancel']").count() == 1
    shoot(page, "job-running")
    go.write_text("go")
    page.wait_for_selector("#djj-fields .djj-state-succeeded")
    page.wait_for_selector('#djj-fields progress[value="100"]')
    page.wait_for_selector("#djj-log >> text=counted to 100")
    assert page.locator("input[value='Ask to cancel']").count() == 0
    assert orm(lambda: Job.objects.get(pk=job.pk).state) == "succeeded"
    shoot(page, "job-succeeded")

    # An unknown job: the steps trace, and resolving its uncertain step.
    stuck = queue_rows["stuck"]
    page.goto(f"{web}/admin/django_jobs/job/{stuck.pk}/change/")
    assert page.locator('tr[data-step="charge"] .djj-badge').inner_text() == "unknown"
    assert page.locator('tr[data-step="reserve"] .djj-badge').inner_text() == "completed"
    assert "1042" in page.locator(".field-payload_display pre").inner_text()
    shoot(page, "job-unknown")
    page.fill("textarea[name=value]", '{"charge": "ch_1042"}')
    page.click("input[value=Resolve]")
    page.wait_for_selector(".messagelist >> text=was resolved as completed")
    assert page.locator("#djj-fields .djj-badge").first.inner_text() == "queued"
    shoot(page, "job-resolved")
    step = orm(JobStep.objects.get, job=stuck, name="charge")
    assert (step.state, step.value) == ("completed", {"charge": "ch_1042"})

    # The job list: badges, progress bars, and "≈" beside the derived row's timestamps.
    page.set_viewport_size({"width": 1920, "height": 1000})
    page.goto(f"{web}/admin/django_jobs/job/?engine=fleet")
    derived = page.locator(f'tr:has(a[href*="/job/{queue_rows["derived"].pk}/change/"])')
    assert derived.locator(".djj-derived").count() == 2  # created, ended
    assert page.locator("#result_list .djj-badge").count() >= 50
    assert page.locator("#result_list progress").count() >= 4
    shoot(page, "jobs", full_page=False)


OVERFLOW_JS = """() => {
    // Every element of the overview whose box ends right of the viewport, with its width.
    const limit = document.documentElement.clientWidth;
    const found = [];
    for (const el of document.querySelectorAll(
        "#djj-queues, #djj-queues th, #djj-queues td, .djj-overview, .djj-overview *")) {
        const box = el.getBoundingClientRect();
        if (box.width && box.right > limit + 0.5) {
            found.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}` +
                `${el.dataset.state ? "[" + el.dataset.state + "]" : ""}: right ${box.right}`);
        }
    }
    return {limit, found, scroll: document.documentElement.scrollWidth};
}"""


def test_the_overview_fits_a_1280_pixel_wide_screen(web, operator, queue_rows, page):
    # Every state in use, on queues with long names and counts in the thousands: the widest
    # table the overview draws.
    now = timezone.now()
    states = ("queued", "running", "waiting", "succeeded", "failed", "blocked", "unknown")
    queues = ("billing-reconciliation-eu-west", "video-transcode-high-priority", "emails")
    rows = [
        Job(
            kind="report.build",
            engine="fleet",
            queue=queue,
            state=state,
            created_at=now,
            run_at=now - timedelta(hours=30),
            idempotency_key=f"wide-{queue}-{state}-{n}",
            started_at=None if state == "queued" else now,
            ended_at=now if state in ("succeeded", "failed") else None,
        )
        for queue in queues
        for state in states
        for n in range(3)
    ]
    orm(Job.objects.bulk_create, rows)
    orm(
        lambda: Job.objects.filter(queue="emails", state="succeeded").update(
            queue="emails-transactional-and-marketing-digest"
        )
    )
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{web}/admin/login/?next=/admin/django_jobs/job/overview/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", "pw-olga")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_jobs/job/overview/")
    page.wait_for_selector('tr[data-queue="video-transcode-high-priority"]')
    assert page.locator("#djj-queues thead th").count() == 11  # queue, 8 states, total, oldest

    measured = page.evaluate(OVERFLOW_JS)
    shot = ROOT / "artifacts" / "admin-overview-1280.png"
    page.screenshot(path=str(shot), full_page=True)
    assert measured["found"] == [], measured
    assert measured["scroll"] <= measured["limit"], measured
