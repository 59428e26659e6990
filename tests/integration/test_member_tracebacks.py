"""A member never sees a server traceback (SPEC §7): not through an error whose message is
made of characters that storing escapes, not through a parent that returns the outcomes of
its children (``gather(failed="collect")``)."""

from __future__ import annotations

import json

import pytest

from django_jobs import Retry, job
from django_jobs.events.payloads import member_text
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobEventRecord
from django_jobs.serialize import TRACEBACK_MARKER
from django_jobs.testing import run_until_idle
from testproject.jobs import square

#: What only a traceback holds: a frame's file line.
FRAME = 'File "'


@pytest.fixture
def kinds():
    defined: list[str] = []

    def define(kind, func, **options):
        defined.append(kind)
        return job(kind, idempotency_key="payload", retry=Retry(attempts=1), **options)(func)

    yield define
    for kind in defined:
        unregister(kind)


def events_as(job_ids, owner) -> list[tuple[str, str]]:
    """The stored (operator's) text and the owner's text of every event of these jobs."""
    rows = JobEventRecord.objects.filter(job_id__in=job_ids).order_by("id")
    assert all(row.owner == str(owner.pk) for row in rows)
    return [(row.data, member_text(row.data)) for row in rows]


def test_a_message_of_nul_characters_leaves_the_traceback_to_operators(
    api_users, api_client, kinds
):
    # Frames of two functions in turn (Python folds repeated ones): a traceback longer than
    # what is kept of it, as a real runner's often is.
    def ping(depth):
        if not depth:
            raise ValueError("\x00" * 200 + "the payload was refused")
        return pong(depth - 1)

    def pong(depth):
        return ping(depth)

    def raises(ctx):
        return ping(12)

    failing = kinds("member.nul_message", raises).as_user(api_users.member, {})
    run_until_idle()
    mine = api_client(api_users.member).get(f"/api/jobs/{failing.pk}/").json()
    assert mine["state"] == "failed" and "the payload was refused" in mine["error"]
    assert FRAME not in mine["error"] and "Traceback" not in mine["error"]
    full = api_client(api_users.operator).get(f"/api/jobs/{failing.pk}/").json()
    assert TRACEBACK_MARKER in full["error"] and FRAME in full["error"]
    for _, owners in events_as([failing.pk], api_users.member):
        assert FRAME not in owners and "Traceback" not in owners


def test_collected_child_errors_reach_the_member_without_the_traceback(
    api_users, api_client, kinds
):
    def collect(ctx):
        ids = ctx.step.spawn("children", square, ctx.payload["children"])
        results = ctx.step.gather("gathered", ids, failed="collect")
        for result in results:
            if result.error:
                ctx.log(f"child #{result.id} failed: {result.error}")
        return [r.as_json() for r in results]  # as docs/workflows.md shows

    parent = kinds("member.collect", collect).as_user(
        api_users.member, {"children": [{"n": 1}, {"n": 2, "fail": True}]}
    )
    run_until_idle()
    member, operator = api_client(api_users.member), api_client(api_users.operator)
    mine = member.get(f"/api/jobs/{parent.pk}/").json()
    assert mine["state"] == "succeeded"
    ok, failed = mine["result"]
    assert (ok["state"], ok["result"], ok["error"]) == ("succeeded", 1, None)
    assert failed["state"] == "failed"
    assert failed["error"].endswith("Last error: RuntimeError: square 2 was asked to fail")
    assert "Traceback" not in json.dumps(mine) and FRAME not in json.dumps(mine)
    assert mine["log"] == [f"child #{failed['id']} failed: {failed['error']}"]
    # The member's events (the parent's log line, the children's ends): no traceback.
    children = list(Job.objects.filter(parent=parent).values_list("pk", flat=True))
    texts = events_as([parent.pk, *children], api_users.member)
    assert any("square 2 was asked to fail" in owners for _, owners in texts)
    for _, owners in texts:
        assert "Traceback" not in owners and FRAME not in owners
    # Operators still read the whole error on the child, in the API and in its events.
    child = operator.get(f"/api/jobs/{failed['id']}/").json()
    assert TRACEBACK_MARKER in child["error"] and FRAME in child["error"]
    assert any(TRACEBACK_MARKER.strip() in stored for stored, _ in texts)
