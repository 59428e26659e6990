"""Workflows from ``manage.py jobs``: the tree in ``inspect``, ``retry --children``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.jobs import fan

pytestmark = pytest.mark.django_db


def jobs(*args: object) -> str:
    out = StringIO()
    call_command("jobs", *[str(a) for a in args], stdout=out, stderr=StringIO())
    return out.getvalue()


def failed_tree(fail: bool = True) -> Job:
    parent = fan.enqueue({"children": [{"n": 1}, {"n": 2, "fail": fail}]})
    run_until_idle()
    parent.refresh_from_db()
    return parent


def test_inspect_prints_the_tree_of_children():
    parent = failed_tree()
    kids = list(Job.objects.filter(parent=parent).order_by("id"))
    page = jobs("inspect", parent.pk)
    assert "Children (2: 1 succeeded, 1 failed):" in page
    assert f"  #{kids[0].pk} workflow.square succeeded" in page
    assert f"  #{kids[1].pk} workflow.square failed" in page
    detail = json.loads(jobs("inspect", parent.pk, "--json"))
    assert detail["children"] == {"succeeded": 1, "failed": 1, "total": 2}
    assert json.loads(jobs("inspect", kids[0].pk, "--json"))["parent"] == parent.pk
    assert "Children" not in jobs("inspect", kids[0].pk)


def test_retry_children_puts_the_parent_back_to_wait():
    parent = failed_tree()
    out = jobs("retry", parent.pk, "--children")
    assert f"Job #{parent.pk} (workflow.fan) waits for its retried children" in out
    parent.refresh_from_db()
    assert parent.state == "waiting" and parent.children_pending == 1
    assert Job.objects.get(parent=parent, payload__n=2).state == "queued"


def test_drain_runs_the_children_and_wakes_the_parent():
    parent = fan.enqueue({"children": [{"n": 2}, {"n": 3}]})
    jobs("drain", "--limit", 10)
    parent.refresh_from_db()
    assert parent.state == "succeeded" and parent.result == [4, 9]
    assert parent.children_pending == 0
