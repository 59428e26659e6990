"""The admin's Workers page and the overview's pause and resume, through Django's test client:
operators act, a view-only staff user looks and is refused."""

from __future__ import annotations

from django_jobs.engine.rows import fleet
from django_jobs.engine.worker.worker import make_worker_id
from django_jobs.models import PausedQueue
from testproject.jobs import noop
from tests.conftest import claim
from tests.integration.test_admin import operator, signed_in, viewer  # noqa: F401 - fixtures

JOBS = "/admin/django_jobs/job/"


def test_the_workers_page_lists_each_row_with_links_to_its_running_jobs(operator):  # noqa: F811
    fleet.register("box-1", queues=["mail"], concurrency=3, pid=4242, hostname="host-a")
    job = noop.enqueue({"w": 1})
    claim(make_worker_id("default", "box-1"))
    page = signed_in(operator).get(f"{JOBS}workers/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-worker="box-1"' in html and "host-a" in html and "4242" in html
    assert "1 x 3" in html and ">mail<" in html
    assert f'href="{JOBS}{job.pk}/change/"' in html
    assert 'data-refresh="1"' in html  # re-reads itself every second
    overview = signed_in(operator).get(f"{JOBS}overview/").content.decode()
    assert f'href="{JOBS}workers/"' in overview


def test_operators_pause_and_resume_from_the_overview(operator, viewer):  # noqa: F811
    noop.enqueue({"q": 1}, queue="mail")
    client = signed_in(operator)
    done = client.post(
        f"{JOBS}queues/pause/",
        {"queue": "mail", "engine": "default", "reason": "SMTP down"},
        follow=True,
    )
    assert "is paused" in done.content.decode()
    paused = PausedQueue.objects.get()
    assert (paused.queue, paused.reason, paused.paused_by) == ("mail", "SMTP down", "operator")
    html = client.get(f"{JOBS}overview/").content.decode()
    assert 'class="djj-badge djj-paused"' in html and "SMTP down" in html

    looker = signed_in(viewer)
    assert looker.get(f"{JOBS}workers/").status_code == 200  # may look
    assert looker.post(f"{JOBS}queues/resume/", {"queue": "mail"}).status_code == 403
    assert 'id="djj-pause-form"' not in looker.get(f"{JOBS}overview/").content.decode()
    assert client.get(f"{JOBS}queues/pause/").status_code == 405

    refused = client.post(f"{JOBS}queues/pause/", {"queue": "", "engine": "default"}, follow=True)
    assert "jobs queues" in refused.content.decode()
    client.post(f"{JOBS}queues/resume/", {"queue": "mail", "engine": "default"})
    assert not PausedQueue.objects.exists()
