"""Workflows in-process: spawn, gather, failures, cancel down the tree, retry with children."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from unittest.mock import patch

import time_machine
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import TestCase, TransactionTestCase

from django_jobs import (
    ChildFailed,
    ChildResult,
    Retry,
    cancel,
    job,
    retry,
)
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobStep
from django_jobs.serialize import job_json
from django_jobs.testing import run_until_idle
from tests.conftest import claim

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)


class KindsMixin:
    """Registers throwaway kinds per test and removes them afterwards."""

    def setUp(self):
        self.kinds: list[str] = []
        self.calls: Counter[str] = Counter()

    def tearDown(self):
        for kind in self.kinds:
            unregister(kind)

    def define(self, kind, func, **options):
        self.kinds.append(kind)
        options.setdefault("idempotency_key", "payload")
        options.setdefault("retry", Retry(attempts=3, delay=0, jitter=False))
        return job(kind, **options)(func)

    def square_kind(self, kind="wf.square", fail=()):
        def square(ctx):
            n = ctx.payload["n"]
            self.calls[f"square:{n}"] += 1
            if n in fail:
                raise RuntimeError(f"square {n} failed")
            return n * n

        return self.define(kind, square, retry=Retry(attempts=1))

    def fan_out_kind(self, kind="wf.fan", child=None, count=5, failed="raise", **options):
        child = child or self.square_kind()

        def fan(ctx):
            self.calls["fan:runs"] += 1
            ids = ctx.step.spawn("children", child, [{"n": n} for n in range(count)])
            results = ctx.step.gather("gathered", ids, failed=failed)
            self.calls["fan:after_gather"] += 1
            if failed == "collect":
                return [r.as_json() for r in results]
            return results

        return self.define(kind, fan, **options)


class WorkflowKinds(KindsMixin, TestCase):
    pass


class FanOutTests(WorkflowKinds):
    def test_five_children_then_results_in_order(self):
        parent = self.fan_out_kind().enqueue({})
        run_until_idle(max_jobs=1)  # the parent alone: it spawns and parks
        parent.refresh_from_db()
        assert parent.state == "waiting"
        assert parent.worker_id is None  # it holds no slot
        assert parent.wait_reason == "waiting for 5 of 5 children in step 'gathered'"
        assert parent.children_pending == 5
        children = list(Job.objects.filter(parent=parent).order_by("id"))
        assert [c.payload for c in children] == [{"n": n} for n in range(5)]
        assert {c.state for c in children} == {"queued"}
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded"
        assert parent.result == [0, 1, 4, 9, 16]
        assert parent.children_pending == 0
        assert all(self.calls[f"square:{n}"] == 1 for n in range(5))
        # Run twice (spawn, then woken), spawned once: the replay inserted nothing.
        assert self.calls["fan:runs"] == 2 and self.calls["fan:after_gather"] == 1
        assert Job.objects.filter(parent=parent).count() == 5
        spawned = JobStep.objects.get(job=parent, name="children")
        assert spawned.value == [c.pk for c in children]

    def test_at_concurrency_one_the_waiting_parent_leaves_room_for_its_children(self):
        # One job at a time (run_until_idle claims one): the children still run, because
        # the waiting parent is not running.
        parent = self.fan_out_kind(count=3).enqueue({})
        ran = run_until_idle()
        assert [j.pk for j in ran].count(parent.pk) == 2
        parent.refresh_from_db()
        assert parent.state == "succeeded" and parent.result == [0, 1, 4]

    def test_children_carry_the_parent_owner_and_tenant(self):
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user("owner1")
        parent = self.fan_out_kind(count=2).enqueue({}, owner=user, tenant="acme")
        run_until_idle(max_jobs=1)
        children = Job.objects.filter(parent=parent)
        assert {(c.owner_id, c.tenant) for c in children} == {(user.pk, "acme")}

    def test_a_single_dict_is_one_child(self):
        child = self.square_kind()

        def one(ctx):
            ids = ctx.step.spawn("child", child, {"n": 7})
            return ctx.step.gather("gathered", ids)

        parent = self.define("wf.one", one).enqueue({})
        run_until_idle()
        parent.refresh_from_db()
        assert parent.result == [49]

    def test_a_deduped_child_without_parent_is_adopted_and_wakes_the_parent(self):
        child = self.square_kind()
        existing = child.enqueue({"n": 3})

        def fan(ctx):
            ids = ctx.step.spawn("children", child, [{"n": 3}, {"n": 4}])
            return ctx.step.gather("gathered", ids)

        parent = self.define("wf.dedupe", fan).enqueue({}, priority=-1)  # runs first
        run_until_idle(max_jobs=1)
        parent.refresh_from_db()
        assert parent.state == "waiting" and parent.children_pending == 2
        existing.refresh_from_db()
        assert existing.parent_id == parent.pk
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded" and parent.result == [9, 16]
        assert self.calls["square:3"] == 1

    def test_spawn_refuses_owner_and_tenant(self):
        child = self.square_kind()

        def bad(ctx):
            ctx.step.spawn("children", child, [{"n": 1}], owner=None)

        parent = self.define("wf.bad_spawn", bad, retry=Retry(attempts=1)).enqueue({})
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "failed" and "owner" in parent.error
        assert not Job.objects.filter(parent=parent).exists()


class FailureTests(WorkflowKinds):
    def test_a_failed_child_fails_the_parent_after_one_attempt(self):
        child = self.square_kind(fail=(2,))
        parent = self.fan_out_kind(child=child, retry=Retry(attempts=5, delay=0)).enqueue({})
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "failed"
        assert parent.attempts == 1
        assert parent.error.startswith("CHILD_FAILED: 1 of 5 children")
        failed_child = Job.objects.get(parent=parent, payload__n=2)
        assert f"#{failed_child.pk} (failed)" in parent.error
        assert self.calls["fan:after_gather"] == 0

    def test_child_failed_carries_the_failed_ids(self):
        child = self.square_kind(fail=(1, 3))
        seen = {}

        def fan(ctx):
            ids = ctx.step.spawn("children", child, [{"n": n} for n in range(4)])
            try:
                return ctx.step.gather("gathered", ids)
            except ChildFailed as exc:
                seen["failed"], seen["code"], seen["ids"] = exc.failed, exc.code, ids
                return "handled"

        parent = self.define("wf.catch", fan).enqueue({})
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded" and parent.result == "handled"
        assert seen["code"] == "CHILD_FAILED"
        assert seen["failed"] == [seen["ids"][1], seen["ids"][3]]

    def test_collect_returns_every_outcome(self):
        child = self.square_kind(fail=(1,))
        parent = self.fan_out_kind(child=child, count=3, failed="collect").enqueue({})
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded"
        states = [r["state"] for r in parent.result]
        assert states == ["succeeded", "failed", "succeeded"]
        assert [r["result"] for r in parent.result] == [0, None, 4]
        assert "square 1 failed" in parent.result[1]["error"]
        ids = JobStep.objects.get(job=parent, name="children").value
        assert [r["id"] for r in parent.result] == ids

    def test_collect_replays_child_results(self):
        child = self.square_kind()
        got = []

        def fan(ctx):
            ids = ctx.step.spawn("children", child, [{"n": 2}])
            results = ctx.step.gather("gathered", ids, failed="collect")
            got.append(results)
            ctx.step.run("after", lambda: None)
            if len(got) == 1:
                raise RuntimeError("once more")
            return None

        parent = self.define("wf.collect_replay", fan).enqueue({})
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded"
        assert got[0] == got[1]
        assert isinstance(got[1][0], ChildResult) and got[1][0].result == 4

    def test_gather_timeout_raises_job_timeout_and_children_keep_running(self):
        child = self.square_kind()

        def fan(ctx):
            ids = ctx.step.spawn("children", child, [{"n": 5}], delay="1h")
            return ctx.step.gather("gathered", ids, timeout="10m")

        handle = self.define("wf.timeout", fan, retry=Retry(attempts=1))
        with time_machine.travel(T0, tick=False) as clock:
            parent = handle.enqueue({})
            run_until_idle()
            parent.refresh_from_db()
            assert parent.state == "waiting"
            assert parent.run_at == T0 + timedelta(minutes=10)
            clock.move_to(T0 + timedelta(minutes=11))
            run_until_idle()
            parent.refresh_from_db()
            assert parent.state == "failed" and "JOB_TIMEOUT: " in parent.error
            kid = Job.objects.get(parent=parent)
            assert kid.state == "queued"
            clock.move_to(T0 + timedelta(hours=2))
            run_until_idle()
            kid.refresh_from_db()
            assert kid.state == "succeeded"


class TreeTests(WorkflowKinds):
    def tree_kinds(self, fail_leaf=()):
        leaf = self.square_kind("wf.leaf", fail=fail_leaf)

        def middle(ctx):
            base = ctx.payload["base"]
            ids = ctx.step.spawn("leaves", leaf, [{"n": base + i} for i in range(2)])
            return sum(ctx.step.gather("leaves_done", ids))

        mid = self.define("wf.middle", middle, retry=Retry(attempts=1))

        def top(ctx):
            ids = ctx.step.spawn("middles", mid, [{"base": 0}, {"base": 10}])
            return ctx.step.gather("middles_done", ids)

        return self.define("wf.top", top, retry=Retry(attempts=1))

    def test_a_grandparent_tree_completes(self):
        root = self.tree_kinds().enqueue({})
        run_until_idle()
        root.refresh_from_db()
        assert root.state == "succeeded"
        assert root.result == [0 + 1, 100 + 121]
        assert Job.objects.filter(parent__parent=root).count() == 4

    def test_cancel_cascades_down_the_tree(self):
        root = self.tree_kinds().enqueue({})
        run_until_idle(max_jobs=3)  # top, then both middles spawn their leaves
        assert Job.objects.filter(parent__parent=root, state="queued").count() == 4
        cancel(root.pk)
        states = Counter(Job.objects.exclude(pk=root.pk).values_list("state", flat=True))
        assert states == {"cancelled": 6}
        root.refresh_from_db()
        assert root.state == "cancelled"
        assert run_until_idle() == []

    def test_retry_with_children_completes_the_tree(self):
        leaf_fails = {"on": True}
        leaf_calls = Counter()

        def leaf(ctx):
            leaf_calls[ctx.payload["n"]] += 1
            if leaf_fails["on"] and ctx.payload["n"] == 11:
                raise RuntimeError("leaf 11 is down")
            return ctx.payload["n"]

        leaf_h = self.define("wf.flaky_leaf", leaf, retry=Retry(attempts=1))

        def middle(ctx):
            ids = ctx.step.spawn("leaves", leaf_h, [{"n": ctx.payload["base"] + i} for i in (0, 1)])
            return sum(ctx.step.gather("leaves_done", ids))

        mid = self.define("wf.flaky_middle", middle, retry=Retry(attempts=1))

        def top(ctx):
            ids = ctx.step.spawn("middles", mid, [{"base": 0}, {"base": 10}])
            return ctx.step.gather("middles_done", ids)

        root = self.define("wf.flaky_top", top, retry=Retry(attempts=1)).enqueue({})
        run_until_idle()
        root.refresh_from_db()
        assert root.state == "failed" and root.error.startswith("CHILD_FAILED")
        leaf_fails["on"] = False
        data = retry(root.pk, children=True)
        assert data["state"] == "waiting"
        root.refresh_from_db()
        assert root.children_pending == 1  # the failed middle; its failed leaf below it
        run_until_idle()
        root.refresh_from_db()
        assert root.state == "succeeded" and root.result == [1, 21]
        # Only the failed leaf ran again; the succeeded ones were not retried.
        assert leaf_calls == {0: 1, 1: 1, 10: 1, 11: 2}

    def test_plain_retry_of_a_parent_gathers_the_same_failed_children(self):
        child = self.square_kind(fail=(0,))
        parent = self.fan_out_kind(child=child, count=2).enqueue({})
        run_until_idle()
        retry(parent.pk)
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "failed" and parent.error.startswith("CHILD_FAILED")
        assert Job.objects.filter(parent=parent).count() == 2  # spawned once
        assert self.calls["square:0"] == 1


class AsyncTests(KindsMixin, TransactionTestCase):
    # The async twins reach the database from sync_to_async's thread: another connection,
    # which must see the committed rows (a TestCase's transaction would hide them).
    def tearDown(self):
        super().tearDown()
        # Close the connection that thread opened, so the test database can be dropped.
        asyncio.run(sync_to_async(connections.close_all)())

    def test_async_twins(self):
        child = self.square_kind()

        async def fan(ctx):
            ids = await ctx.step.aspawn("children", child, [{"n": 2}, {"n": 3}])
            await asyncio.sleep(0)
            return await ctx.step.agather("gathered", ids)

        parent = self.define("wf.async", fan).enqueue({})
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded" and parent.result == [4, 9]


class JsonTests(WorkflowKinds):
    def test_job_json_has_parent_and_children(self):
        child = self.square_kind(fail=(1,))
        parent = self.fan_out_kind(child=child, count=3).enqueue({})
        assert job_json(parent)["parent"] is None
        assert job_json(parent)["children"] is None
        run_until_idle(max_jobs=2)  # the parent, then its first child
        parent.refresh_from_db()
        data = job_json(parent)
        assert data["children"] == {"queued": 2, "succeeded": 1, "total": 3}
        kid = Job.objects.filter(parent=parent).first()
        assert job_json(kid)["parent"] == parent.pk
        assert job_json(kid)["children"] is None


class DemoTests(TestCase):
    def test_the_demo_publish_job_fans_out_renders_and_gathers_them(self):
        from testproject.jobs import publish

        parent = publish.enqueue({"video": "intro", "sizes": [1, 2]})
        with patch.dict("os.environ", {"DEMO_FRAME_SECONDS": "0"}):
            run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded", parent.error
        assert parent.result == {
            "video": "intro",
            "urls": ["/media/intro-1.mp4", "/media/intro-2.mp4"],
        }
        kinds = Job.objects.filter(parent=parent).values_list("kind", flat=True)
        assert list(kinds) == ["demo.render", "demo.render"]


class EndPathTests(WorkflowKinds):
    """Every way a child ends counts against its parent: rescue, cancel, pruning."""

    def test_a_child_failed_by_the_rescue_wakes_its_parent(self):
        from django_jobs import clock
        from django_jobs.store import get_store

        child = self.square_kind()
        store = get_store()
        with time_machine.travel(T0, tick=False) as traveller:
            parent = self.fan_out_kind(child=child, count=1).enqueue({})
            run_until_idle(max_jobs=1)  # the parent spawns and waits
            claimed = claim("dead-worker", engine=None)
            assert [j.parent_id for j in claimed] == [parent.pk]
            traveller.move_to(T0 + timedelta(minutes=5))  # its worker died: the lease ran out
            rescued = store.rescue(engine=None, now=clock.now(), error="lease ran out")
            assert rescued == [(claimed[0].pk, "failed")]  # its one attempt was spent
            parent.refresh_from_db()
            assert parent.children_pending == 0
            assert parent.run_at == T0 + timedelta(minutes=5)  # woken: due now
            run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "failed" and parent.error.startswith("CHILD_FAILED")

    def test_a_child_resolved_as_failed_wakes_its_parent(self):
        from django_jobs import Uncertain, resolve

        def unsure(ctx):
            ctx.step.run("charge", lambda: 1)
            raise Uncertain("did the charge go through?")

        child = self.define("wf.unsure", unsure, retry=Retry(attempts=1))
        parent = self.fan_out_kind(child=child, count=1).enqueue({})
        run_until_idle()
        kid = Job.objects.get(parent=parent)
        assert kid.state == "unknown"
        parent.refresh_from_db()
        assert parent.state == "waiting" and parent.children_pending == 1  # unknown is live
        resolve(kid.pk, "charge", "failed")
        parent.refresh_from_db()
        assert parent.children_pending == 0
        run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "failed" and parent.error.startswith("CHILD_FAILED")

    def test_cancelling_one_child_counts_it_as_ended(self):
        parent = self.fan_out_kind(count=2, failed="collect").enqueue({})
        run_until_idle(max_jobs=1)
        first = Job.objects.filter(parent=parent).order_by("id").first()
        cancel(first.pk)
        parent.refresh_from_db()
        assert parent.children_pending == 1 and parent.state == "waiting"
        run_until_idle()
        parent.refresh_from_db()
        assert [r["state"] for r in parent.result] == ["cancelled", "succeeded"]

    def test_pruning_an_ended_parent_leaves_its_live_children_readable(self):
        from django_jobs.engine.maintenance import prune

        child = self.square_kind()

        def fire_and_forget(ctx):
            return ctx.step.spawn("later", child, [{"n": 1}, {"n": 2}], delay="100d")

        with time_machine.travel(T0, tick=False):
            parent = self.define("wf.forget", fire_and_forget).enqueue({})
            run_until_idle()
        parent.refresh_from_db()
        assert parent.state == "succeeded"  # it did not gather: its children are still queued
        with time_machine.travel(T0 + timedelta(days=40), tick=False):
            assert prune("30d").jobs == 1  # the raw delete clears the children's link first
        assert not Job.objects.filter(pk=parent.pk).exists()
        kids = Job.objects.filter(pk__in=parent.result)
        assert [(k.state, k.parent_id) for k in kids] == [("queued", None), ("queued", None)]

    def test_the_events_carry_parent_and_children(self):
        import json

        from django_jobs.events.payloads import event_text

        parent = self.fan_out_kind(count=2).enqueue({})
        run_until_idle(max_jobs=2)
        parent.refresh_from_db()
        data = json.loads(event_text("job.waiting", parent, T0))
        assert data["job"]["parent"] is None
        assert data["job"]["children"] == {"queued": 1, "succeeded": 1, "total": 2}
        kid = Job.objects.filter(parent=parent).first()
        data = json.loads(event_text("job.succeeded", kid, T0))
        assert data["job"]["parent"] == parent.pk and data["job"]["children"] is None


class ForeignChildTests(WorkflowKinds):
    def test_a_child_of_another_parent_is_rechecked_not_adopted(self):
        from django_jobs.engine.durable.workflows import FOREIGN_RECHECK

        child = self.square_kind()

        def fan(ctx):
            ids = ctx.step.spawn("children", child, [{"n": 6}], delay=ctx.payload["delay"])
            return ctx.step.gather("gathered", ids)

        handle = self.define("wf.shared", fan)
        with time_machine.travel(T0, tick=False) as traveller:
            first = handle.enqueue({"delay": "1m"})
            run_until_idle()
            second = handle.enqueue({"delay": "2m"})  # its child dedupes onto first's
            run_until_idle()
            first.refresh_from_db()
            second.refresh_from_db()
            kid = Job.objects.get(parent=first)
            assert JobStep.objects.get(job=second, name="children").value == [kid.pk]
            assert (first.children_pending, second.children_pending) == (1, 0)
            assert second.state == "waiting"
            assert second.run_at == T0 + FOREIGN_RECHECK  # it cannot be woken by kid
            traveller.move_to(T0 + timedelta(minutes=1))
            run_until_idle()  # second re-checks (kid still queued), then kid, then first
            second.refresh_from_db()
            assert second.state == "waiting"
            traveller.move_to(T0 + timedelta(minutes=1) + FOREIGN_RECHECK)
            run_until_idle()  # second's next re-check finds kid ended
        first.refresh_from_db()
        second.refresh_from_db()
        assert (first.state, first.result) == ("succeeded", [36])
        assert (second.state, second.result) == ("succeeded", [36])
        assert self.calls["square:6"] == 1
