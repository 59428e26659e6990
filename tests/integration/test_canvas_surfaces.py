"""A flow built at the call site is a workflow like any other: the admin lists its children,
the API's ``children/`` pages them, and the live events carry the flow and each member."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from django_jobs import chain, group
from django_jobs.canvas import FLOW_KIND
from django_jobs.models import Job, JobEventRecord
from django_jobs.testing import run_until_idle
from testproject.jobs import canvas_add, canvas_total


@pytest.fixture
def chord(api_users, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        flow = chain(
            group(canvas_add.s({"n": n}) for n in range(3)), canvas_total.s({"tag": "surf"})
        ).enqueue(owner=api_users.member)
    with django_capture_on_commit_callbacks(execute=True):
        run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "succeeded"
    return flow


def test_the_admin_job_page_lists_the_flows_members(api_users, chord):
    client = Client()
    client.force_login(api_users.superuser)
    html = client.get(f"/admin/django_jobs/job/{chord.pk}/change/").content.decode()
    assert 'id="djj-children"' in html
    for kid in Job.objects.filter(parent_id=chord.pk):
        assert f"/admin/django_jobs/job/{kid.pk}/change/" in html


def test_the_api_lists_the_flows_children_for_its_owner_and_operators(api_users, api_client, chord):
    body = api_client(api_users.member).get(f"/api/jobs/{chord.pk}/children/").json()
    assert body["count"] == 4
    assert [c["kind"] for c in body["results"]] == ["canvas.add"] * 3 + ["canvas.total"]
    assert {c["parent"] for c in body["results"]} == {chord.pk}
    data = api_client(api_users.operator).get(f"/api/jobs/{chord.pk}/").json()
    assert data["kind"] == FLOW_KIND and data["children"] == {"succeeded": 4, "total": 4}
    assert api_client(api_users.other).get(f"/api/jobs/{chord.pk}/children/").status_code == 404


def test_events_carry_the_flow_and_each_member(chord):
    def types(job_id):
        rows = JobEventRecord.objects.filter(job_id=job_id).order_by("id")
        return [r.type for r in rows], [json.loads(r.data)["job"] for r in rows]

    flow_types, _ = types(chord.pk)
    assert flow_types[0] == "job.created" and flow_types[-1] == "job.succeeded"
    assert "job.waiting" in flow_types  # waiting on its members, holding no slot
    for kid in Job.objects.filter(parent_id=chord.pk):
        kid_types, jobs = types(kid.pk)
        # (job.created follows the commit of the spawn: in this test, the captured callbacks
        # run once run_until_idle is done)
        assert "job.created" in kid_types and "job.started" in kid_types
        assert "job.succeeded" in kid_types
        assert {j["parent"] for j in jobs} == {chord.pk}
