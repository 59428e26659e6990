"""Workflows over the REST API: the children list, its authorization, retry with children."""

from __future__ import annotations

import pytest

from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.jobs import fan


@pytest.fixture
def tree(api_users):
    """A member's parent whose second child failed (so the parent failed too)."""
    parent = fan.enqueue(
        {"children": [{"n": 1}, {"n": 2, "fail": True}, {"n": 3}]}, owner=api_users.member
    )
    run_until_idle()
    parent.refresh_from_db()
    assert parent.state == "failed"
    return parent


def test_the_owner_lists_the_children_in_spawn_order(api_users, api_client, tree):
    body = api_client(api_users.member).get(f"/api/jobs/{tree.pk}/children/").json()
    assert body["count"] == 3 and body["next"] is None
    assert [c["payload"]["n"] for c in body["results"]] == [1, 2, 3]
    assert [c["state"] for c in body["results"]] == ["succeeded", "failed", "succeeded"]
    assert {c["parent"] for c in body["results"]} == {tree.pk}
    assert {c["children"] for c in body["results"]} == {None}
    # A member never sees a child's traceback, in this list either.
    assert "Traceback" not in body["results"][1]["error"]


def test_children_are_paginated(api_users, api_client, tree):
    body = api_client(api_users.member).get(f"/api/jobs/{tree.pk}/children/?page_size=2").json()
    assert body["count"] == 3 and len(body["results"]) == 2 and body["next"]


def test_another_members_children_are_404_and_an_operator_sees_them(api_users, api_client, tree):
    assert api_client(api_users.other).get(f"/api/jobs/{tree.pk}/children/").status_code == 404
    assert api_client().get(f"/api/jobs/{tree.pk}/children/").status_code in (401, 403)
    body = api_client(api_users.operator).get(f"/api/jobs/{tree.pk}/children/").json()
    assert body["count"] == 3


def test_job_json_has_parent_and_children_counts(api_users, api_client, tree):
    member = api_client(api_users.member)
    data = member.get(f"/api/jobs/{tree.pk}/").json()
    assert data["parent"] is None
    assert data["children"] == {"succeeded": 2, "failed": 1, "total": 3}
    listed = {j["id"]: j for j in member.get("/api/jobs/").json()["results"]}
    assert listed[tree.pk]["children"] == data["children"]
    kid = Job.objects.filter(parent=tree).first()
    assert listed[kid.pk]["parent"] == tree.pk and listed[kid.pk]["children"] is None


def test_retry_with_children_is_for_operators(api_users, api_client, tree):
    url = f"/api/jobs/{tree.pk}/retry/"
    refused = api_client(api_users.member).post(url, {"children": True}, format="json")
    assert refused.status_code == 403
    bad = api_client(api_users.operator).post(url, {"children": "yes"}, format="json")
    assert bad.status_code == 400 and "children" in bad.json()["errors"]
    done = api_client(api_users.operator).post(url, {"children": True}, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["state"] == "waiting"
    failed = Job.objects.get(parent=tree, payload__n=2)
    assert failed.state == "queued"
    tree.refresh_from_db()
    assert tree.children_pending == 1


def test_the_admin_job_page_lists_children_and_links_the_parent(api_users, tree):
    from django.test import Client

    client = Client()
    client.force_login(api_users.superuser)
    html = client.get(f"/admin/django_jobs/job/{tree.pk}/change/").content.decode()
    kids = list(Job.objects.filter(parent=tree).order_by("id"))
    for kid in kids:
        assert f'<tr data-child="{kid.pk}">' in html
        assert f'href="/admin/django_jobs/job/{kid.pk}/change/"' in html
    assert '<span class="djj-badge djj-state-failed">failed</span>' in html
    assert "3 (2 succeeded, 1 failed)" in html
    assert 'name="children"' in html  # retry with children, for a failed parent
    kid_html = client.get(f"/admin/django_jobs/job/{kids[0].pk}/change/").content.decode()
    assert f'<a href="/admin/django_jobs/job/{tree.pk}/change/">#{tree.pk}</a>' in kid_html
    assert 'id="djj-children"' not in kid_html
    posted = client.post(f"/admin/django_jobs/job/{tree.pk}/retry/", {"children": "on"})
    assert posted.status_code == 302
    tree.refresh_from_db()
    assert tree.state == "waiting" and tree.children_pending == 1
