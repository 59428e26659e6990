"""The admin's Workers page and the overview's pause and resume, through Django's test client:
operators act, a view-only staff user looks and is refused."""

from __future__ import annotations

import re

from django_jobs import clock
from django_jobs.engine.rows import fleet
from django_jobs.engine.worker.worker import make_worker_id
from django_jobs.models import PausedQueue, worker_pid
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


def test_the_workers_page_shows_each_process_and_a_jobs_page_names_its_process(operator):  # noqa: F811
    job = noop.enqueue({"w": 2})
    worker_id = make_worker_id("default", "box-2")
    claim(worker_id)
    pid = worker_pid(worker_id)  # the claim's process: this one
    processes = [
        fleet.process_entry(
            slot=slot,
            pid=pid + slot,
            generation=1,
            started_at=clock.now(),
            rss_bytes=(60 + slot) * 2**20,
            jobs_done=10 + slot,
            restarts=slot,
            jobs=[job.pk] if slot == 0 else [],
        )
        for slot in (0, 1)
    ]
    fleet.register("box-2", processes=2, pid=1, processes_detail=processes)
    client = signed_in(operator)
    html = client.get(f"{JOBS}workers/").content.decode()
    rows = re.findall(r'<tr class="djj-process" id="djj-process-(\d+)".*?</tr>', html, re.S)
    assert rows == [str(pid), str(pid + 1)]
    first = re.search(rf'id="djj-process-{pid}".*?</tr>', html, re.S)[0]
    assert 'data-process-of="box-2"' in first and "generation 1" in first and "60 MiB" in first
    assert f'href="{JOBS}{job.pk}/change/"' in first and "0 restarts" in first
    second = re.search(rf'id="djj-process-{pid + 1}".*?</tr>', html, re.S)[0]
    assert "61 MiB" in second and "1 restart<" in second and 'data-running="0"' in second
    # The job's page names the process running it, linked to its row on the Workers page.
    page = client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert f'href="{JOBS}workers/#djj-process-{pid}"' in page
    assert f"process {pid}</a> of worker box-2" in page
