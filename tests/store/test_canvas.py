"""Canvas at the call site: ``chain``, ``group`` and chords run as a ``django_jobs.flow`` job
whose members are its children (``spawn`` + ``gather`` steps)."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from django_jobs import ChildFailed, InvalidPayload, UnknownKind, chain, group
from django_jobs.canvas import FLOW_KIND
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job, JobStep
from django_jobs.testing import run_until_idle
from testproject.jobs import canvas_add, canvas_echo, canvas_total
from testproject.models import Execution

pytestmark = pytest.mark.django_db


def effects(prefix: str) -> list[str]:
    return sorted(
        Execution.objects.filter(label__startswith=prefix).values_list("label", flat=True)
    )


def test_a_chain_runs_its_links_in_order_passing_each_result_on():
    flow = chain(canvas_add.s({"n": 1}), canvas_add.s({"n": 2}), canvas_add.s({"n": 3})).enqueue()
    assert flow.kind == FLOW_KIND and flow.deduped is False
    ran = run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "succeeded" and flow.result == 6  # (0 + 1) + 2 + 3
    kids = list(Job.objects.filter(parent_id=flow.pk).order_by("pk"))
    assert [k.payload["n"] for k in kids] == [1, 2, 3]
    assert [k.result for k in kids] == [1, 3, 6]
    # Each link starts only once the one before it has ended.
    assert all(a.ended_at <= b.started_at for a, b in itertools.pairwise(kids))
    order = [j.pk for j in ran if j.kind == "canvas.add"]
    assert order == [k.pk for k in kids]
    names = list(JobStep.objects.filter(job_id=flow.pk).values_list("name", flat=True))
    assert names == ["0.spawn", "0.gather", "1.spawn", "1.gather", "2.spawn", "2.gather"]


def test_the_first_link_gets_no_previous_and_the_others_get_the_result_before():
    flow = chain(canvas_echo.s({"a": 1}), canvas_echo.s({"b": 2})).enqueue()
    run_until_idle()
    kids = list(Job.objects.filter(parent_id=flow.pk).order_by("pk"))
    assert kids[0].result == {"payload": {"a": 1}, "previous": None}
    # Immutable by default (Celery's .si()): the payload stays the member's own.
    assert kids[1].result == {"payload": {"b": 2}, "previous": kids[0].result}


def test_a_group_runs_side_by_side_and_returns_the_results_in_order():
    flow = group(canvas_add.s({"n": n}) for n in range(5)).enqueue()
    run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "succeeded" and flow.result == [0, 1, 2, 3, 4]
    # One spawn for the five (one kind, same options), one gather.
    steps = list(JobStep.objects.filter(job_id=flow.pk).values_list("name", flat=True))
    assert steps == ["spawn.0", "gather"]
    assert flow.children_total == 5


def test_a_chord_hands_the_group_results_to_the_callback():
    flow = chain(group(canvas_add.s({"n": n}) for n in range(10)), canvas_total.s({})).enqueue()
    run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "succeeded"
    assert flow.result == {"sum": 45, "count": 10}
    assert effects("canvas.total") == ["canvas.total:"]
    assert len(effects("canvas.add")) == 10


def test_nesting_a_group_inside_a_chain_inside_a_group():
    inner = chain(canvas_add.s({"n": 100}), group(canvas_echo.s({"k": 1}), canvas_echo.s({"k": 2})))
    flow = group(canvas_add.s({"n": 7}), inner, canvas_echo.s({"k": 3})).enqueue()
    run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "succeeded", flow.error
    assert flow.result == [
        7,
        [
            {"payload": {"k": 1}, "previous": 100},
            {"payload": {"k": 2}, "previous": 100},
        ],
        {"payload": {"k": 3}, "previous": None},
    ]
    sub = Job.objects.get(parent_id=flow.pk, kind=FLOW_KIND)
    assert Job.objects.filter(parent_id=sub.pk).count() == 3  # the chain's two links: 1 + 2


def test_a_member_that_fails_fails_the_flow_with_child_failed():
    flow = chain(
        canvas_add.s({"n": 1}), canvas_add.s({"n": 2, "fail": True}), canvas_add.s({"n": 3})
    ).enqueue()
    run_until_idle()
    flow.refresh_from_db()
    assert flow.state == "failed"
    assert flow.error.startswith(ChildFailed.code)
    # The link after the failed one never ran.
    kids = Job.objects.filter(parent_id=flow.pk).order_by("pk")
    assert [k.payload["n"] for k in kids] == [1, 2]


def test_unknown_kinds_and_bad_member_payloads_are_refused_at_enqueue():
    with pytest.raises(UnknownKind):
        lookup(FLOW_KIND).enqueue({"chain": [{"kind": "nobody.here", "payload": {}}]})
    with pytest.raises(InvalidPayload) as caught:
        chain(canvas_add.s({"n": 1}), canvas_add.s({"n": "not a number"})).enqueue()
    assert "flow.chain[1] (canvas.add)" in caught.value.message
    with pytest.raises(InvalidPayload, match="owner= is not for a flow's member"):
        group(canvas_add.s({"n": 1}, owner=1)).enqueue()
    with pytest.raises(InvalidPayload, match="enqueue takes no option 'colour'"):
        group(canvas_add.s({"n": 1}, colour="red")).enqueue()
    with pytest.raises(TypeError, match="takes signatures"):
        chain(canvas_add.s({"n": 1}), {"n": 2})
    assert not Job.objects.exists()


def test_the_flow_key_is_the_canvas_hash_unless_given():
    canvas = chain(canvas_add.s({"n": 1}), canvas_add.s({"n": 2}))
    first = canvas.enqueue()
    again = canvas.enqueue()
    assert again.pk == first.pk and again.deduped
    assert first.idempotency_key.startswith("payload:")
    other = canvas.enqueue(idempotency_key="nightly:2026-12-02")
    assert other.pk != first.pk and other.idempotency_key == "nightly:2026-12-02"


def test_member_options_reach_each_member_and_owner_is_the_flows(django_user_model):
    user = django_user_model.objects.create_user("canvas-owner")
    later = timezone.now() + timedelta(hours=1)
    flow = group(
        canvas_add.s({"n": 1}, queue="elsewhere", priority=5),
        canvas_add.s({"n": 2}, run_at=later),
        canvas_add.s({"n": 3}, delay=timedelta(minutes=5), idempotency_key="three"),
    ).enqueue(owner=user, tenant="acme")
    run_until_idle(max_jobs=1)  # the flow spawns its members, then waits
    kids = {k.payload["n"]: k for k in Job.objects.filter(parent_id=flow.pk)}
    assert kids[1].queue == "elsewhere" and kids[1].priority == 5
    assert kids[2].run_at == later
    assert kids[3].idempotency_key == "three" and kids[3].run_at > timezone.now()
    assert {k.owner_id for k in kids.values()} == {user.pk}
    assert {k.tenant for k in kids.values()} == {"acme"}


def test_the_flow_kind_is_operator_only_on_the_default_engine():
    described = lookup(FLOW_KIND).describe()
    assert described["member_safe"] is False and described["engine"] == "default"


def test_a_group_stores_runs_of_one_kind_once_and_keeps_the_members_order():
    canvas = group(
        canvas_add.s({"n": 1}),
        canvas_add.s({"n": 2}),
        canvas_echo.s({"e": 1}),
        canvas_add.s({"n": 3}, priority=1),
        canvas_add.s({"n": 4}, priority=1),
    )
    assert canvas.describe() == {
        "group": [
            {"kind": "canvas.add", "payloads": [{"n": 1}, {"n": 2}]},
            {"kind": "canvas.echo", "payload": {"e": 1}},
            {"kind": "canvas.add", "payloads": [{"n": 3}, {"n": 4}], "options": {"priority": 1}},
        ]
    }
    flow = canvas.enqueue()
    run_until_idle()
    flow.refresh_from_db()
    assert flow.result == [1, 2, {"payload": {"e": 1}, "previous": None}, 3, 4]


def test_a_batch_of_payloads_belongs_in_a_group():
    with pytest.raises(InvalidPayload, match="belongs in a group"):
        lookup(FLOW_KIND).enqueue({"chain": [{"kind": "canvas.add", "payloads": [{"n": 1}]}]})
    with pytest.raises(InvalidPayload, match=r"flow.group\[0\].payloads\[1\] \(canvas.add\)"):
        lookup(FLOW_KIND).enqueue(
            {"group": [{"kind": "canvas.add", "payloads": [{"n": 1}, {"n": "x"}]}]}
        )


def test_a_chord_of_ten_thousand_small_members_fits_in_one_payload():
    from django_jobs.validation import payload_limit, storable_payload

    canvas = chain(group(canvas_add.s({"n": n}) for n in range(10_000)), canvas_total.s({}))
    assert len(storable_payload(canvas.describe())) < payload_limit()
