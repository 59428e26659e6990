"""``django_jobs.celery`` canvas: Celery's argument passing on durable flows: a chain's link
gets the result before it first (not after ``.si()``), a chord's body the list of its
header's results, and a member that fails stops the flow."""

from __future__ import annotations

import pytest

from django_jobs.celery import chain, chord, group, states
from django_jobs.celery.exceptions import ChordError
from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.shop import tasks

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def seen():
    tasks.seen.clear()
    yield tasks.seen
    tasks.seen.clear()


def test_a_chain_hands_each_result_to_the_next_as_its_first_argument():
    result = chain(tasks.add.s(2, 2), tasks.add.s(4), tasks.add.s(8)).apply_async()
    run_until_idle()
    assert result.get(timeout=0) == 16  # ((2 + 2) + 4) + 8


def test_the_pipe_makes_a_chain_and_si_is_immutable():
    result = (tasks.add.s(1, 1) | tasks.add.si(10, 10) | tasks.add.s(5)).delay()
    run_until_idle()
    assert result.get(timeout=0) == 25  # 20 + 5: the second link ignored the 2 before it


def test_a_chord_body_gets_the_list_of_its_headers_results():
    result = chord(tasks.add.s(i, i) for i in range(4))(tasks.total.s(extra=1))
    run_until_idle()
    assert result.get(timeout=0) == 0 + 2 + 4 + 6 + 1
    assert tasks.seen == [("total", [0, 2, 4, 6], 1)]


def test_a_group_returns_the_list_of_results_in_order():
    result = group(tasks.add.s(i, 1) for i in range(3)).apply_async()
    run_until_idle()
    assert result.get(timeout=0) == [1, 2, 3]


def test_a_group_after_a_link_gives_each_member_that_result():
    result = chain(tasks.add.s(1, 2), group(tasks.add.s(10), tasks.add.s(20))).apply_async()
    run_until_idle()
    assert result.get(timeout=0) == [13, 23]


def test_a_chord_with_a_failing_member_never_runs_its_body(seen):
    header = [tasks.add.s(1, 1), tasks.boom.si("sku-9"), tasks.add.s(2, 2)]
    result = chord(header, tasks.total.s()).apply_async()
    run_until_idle()
    assert ("boom", "sku-9") in seen and not [s for s in seen if s[0] == "total"]
    assert result.state == states.FAILURE
    with pytest.raises(ChordError):
        result.get(timeout=0)


def test_each_call_of_a_canvas_is_a_flow_of_its_own():
    sig = chain(tasks.add.s(1, 1), tasks.add.s(1))
    first, second = sig.apply_async(), sig.apply_async()
    assert first.id != second.id
    run_until_idle()
    assert first.get(timeout=0) == second.get(timeout=0) == 3


def test_apply_async_link_runs_the_callback_with_the_result():
    result = tasks.add.apply_async((3, 4), link=tasks.add.s(100))
    run_until_idle()
    assert result.get(timeout=0) == 107


def test_link_error_calls_a_request_exc_traceback_errback_and_enqueues_an_id_one(seen):
    failed = tasks.boom.apply_async(("sku-3",), link_error=tasks.on_error.s())
    run_until_idle()
    assert ("errback", failed.id, "KeyError", True) in seen
    again = tasks.boom.apply_async(("sku-4",), link_error=[tasks.on_error_id.s()])
    run_until_idle()
    assert ("errback-id", again.id) in seen
    ok = tasks.add.apply_async((1, 1), link_error=tasks.on_error_id.s())
    run_until_idle()
    assert ok.get(timeout=0) == 2 and ("errback-id", ok.id) not in seen


def test_members_are_jobs_of_their_tasks_kinds_under_the_flow():
    result = chain(tasks.add.s(1, 1), tasks.add.s(1)).apply_async()
    run_until_idle()
    flow = Job.objects.get(pk=int(result.id))
    kinds = list(Job.objects.filter(parent_id=flow.pk).values_list("kind", flat=True))
    assert kinds == [tasks.add.name, tasks.add.name]
