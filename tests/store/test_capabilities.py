"""The store's capability flags and the methods behind them, on whichever database runs.

Callers ask a flag (``supports_listen``, ``supports_skip_locked``, ``estimates_row_counts``,
...) instead of the vendor, so each flag must say what the store really does: these tests hold
every store to its own flags, and run on SQLite and PostgreSQL (CI runs tests/store on both).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from django_jobs.engine.run.loops import bound_silent_network
from django_jobs.engine.worker.worker import Worker
from django_jobs.models import Job, JobStep, PrunedCount
from django_jobs.states import ENDED_STATES, LIVE_STATES
from django_jobs.store import Store, get_store
from django_jobs.store import events as event_rows
from django_jobs.store.event_rows import NewEvent
from tests.conftest import on_postgres
from tests.locks import held_open

T0 = datetime(2026, 4, 1, 9, 0, tzinfo=UTC)
FLAGS = (
    "supports_listen",
    "supports_skip_locked",
    "estimates_row_counts",
    "inserts_events_in_one_statement",
)


def make_job(key: str, state: str = "succeeded", **fields) -> Job:
    return Job.objects.create(
        kind=fields.pop("kind", "test.noop"),
        state=state,
        idempotency_key=key,
        attempts=1,
        max_attempts=1,
        created_at=T0,
        run_at=T0,
        ended_at=T0 if state in ENDED_STATES else None,
        **fields,
    )


def test_every_flag_is_declared_on_store_and_set_by_the_database_s_store():
    store = get_store()
    for flag in FLAGS:
        assert isinstance(getattr(Store, flag), bool)
        assert isinstance(getattr(store, flag), bool)
    assert store.poll_interval_default > 0
    # PostgreSQL can do all of it, SQLite none: the flags, not the vendor, tell them apart.
    assert {flag: getattr(store, flag) for flag in FLAGS} == dict.fromkeys(FLAGS, on_postgres())


# -- supports_listen --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_listen_for_jobs_wakes_on_a_committed_notify_only():
    store = get_store()
    if not store.supports_listen:
        with pytest.raises(NotImplementedError):
            store.listen_for_jobs()
        return
    listener = store.listen_for_jobs()
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            store.notify({"rolled-back"})
            raise RuntimeError("roll back")
        with transaction.atomic():
            store.notify({"committed"})
        # A notification sent in a rolled-back transaction never arrives: the first one
        # heard is the committed one.
        assert listener.wait(30) == ["committed"]
    finally:
        listener.close()


@pytest.mark.django_db(transaction=True)
def test_listen_for_jobs_hears_an_enqueue_of_its_engine():
    from testproject.jobs import noop

    store = get_store()
    if not store.supports_listen:
        pytest.skip("this store does not listen (supports_listen is False): workers poll")
    listener = store.listen_for_jobs()
    try:
        noop.enqueue({"wake": "up"})
        assert listener.wait(30) == ["default"]
    finally:
        listener.close()


@pytest.mark.django_db(transaction=True)
def test_listen_for_events_wakes_when_event_rows_commit():
    store = get_store()
    if not store.supports_listen:
        with pytest.raises(NotImplementedError):
            store.listen_for_events()
        return
    listener = store.listen_for_events()
    try:
        event_rows.insert(connection.alias, [NewEvent("job.progress", 1, None, "{}", T0)])
        assert listener.wait(30) == [""]
    finally:
        listener.close()


def test_a_worker_listens_only_where_its_store_can(settings):
    settings.JOBS = {"POLL_INTERVAL": None}
    worker = Worker(burst=True)
    # No POLL_INTERVAL: the store's own default, long only where a notification wakes first.
    assert worker.poll == get_store().poll_interval_default
    assert worker.poll > 1 if worker.store.supports_listen else worker.poll < 1
    settings.JOBS = {"POLL_INTERVAL": "3s"}
    assert Worker(burst=True).poll == 3.0


# -- supports_skip_locked: lock_jobs ----------------------------------------------------------


@pytest.mark.django_db
def test_lock_jobs_returns_the_matching_ids_up_to_the_limit():
    store = get_store()
    ids = [make_job(f"lock:{i}").pk for i in range(5)]
    make_job("lock:live", state="queued")
    with transaction.atomic():
        locked = store.lock_jobs(Q(state__in=ENDED_STATES), 3)
    assert len(locked) == 3 and set(locked) <= set(ids)
    with transaction.atomic():
        assert sorted(store.lock_jobs(Q(state__in=ENDED_STATES), 10)) == ids


@pytest.mark.django_db(transaction=True)
def test_lock_jobs_passes_over_rows_another_transaction_holds_where_it_can():
    store = get_store()
    if not store.supports_skip_locked:
        # One writer at a time: a second transaction cannot hold a row while this one reads.
        pytest.skip("this store has one writer (supports_skip_locked is False)")
    held, free = make_job("held").pk, make_job("free").pk

    def hold() -> None:
        assert store.lock_jobs(Q(pk=held), 1) == [held]

    with held_open(hold), transaction.atomic():
        # Not a wait on the held row: the other one at once.
        assert store.lock_jobs(Q(pk__in=[held, free]), 10) == [free]
    with transaction.atomic():
        assert sorted(store.lock_jobs(Q(pk__in=[held, free]), 10)) == [held, free]


# -- estimates_row_counts ---------------------------------------------------------------------


@pytest.mark.django_db
def test_estimated_rows_is_the_planner_s_figure_where_the_store_has_one():
    store = get_store()
    Job.objects.bulk_create(
        Job(kind="test.noop", state="succeeded", idempotency_key=f"est:{i}", created_at=T0)
        for i in range(300)
    )
    if not store.estimates_row_counts:
        assert store.estimated_rows(Job) is None
        return
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")  # counts this transaction's rows too
    estimate = store.estimated_rows(Job)
    assert estimate is not None and abs(estimate - 300) <= 30


@pytest.mark.django_db
def test_the_admin_s_paginator_asks_the_store_for_its_estimate(monkeypatch):
    from django_jobs.admin import paginator

    store = get_store()
    asked: list[type] = []
    monkeypatch.setattr(
        type(store), "estimated_rows", lambda self, model: asked.append(model) or 10**6
    )
    monkeypatch.setattr(paginator, "EXACT_COUNT_BELOW", 10)
    make_job("one")
    count = paginator.EstimatedCountPaginator(Job.objects.all(), 20).count
    if store.estimates_row_counts:
        assert (count, asked) == (10**6, [Job])
    else:
        assert (count, asked) == (1, [])  # counted, never asked


# -- inserts_events_in_one_statement ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_event_batch_in_autocommit_is_one_statement_where_the_store_says_so():
    store = get_store()
    events = [NewEvent("job.progress", i, None, "{}", T0) for i in range(3)]
    with CaptureQueriesContext(connection) as queries:
        stored = event_rows.insert(connection.alias, events)
    assert [e.job_id for e in stored] == [0, 1, 2]
    if store.inserts_events_in_one_statement:
        assert len(queries) == 1
    else:
        assert len(queries) > 1  # its own transaction around the insert


# -- worker_connection_options ----------------------------------------------------------------


def test_a_worker_s_connection_options_never_override_the_project_s(monkeypatch):
    store = get_store()
    settings_dict = store.connection.settings_dict
    monkeypatch.setitem(settings_dict, "OPTIONS", {"project": "own"})
    if store.worker_connection_options:
        name = next(iter(store.worker_connection_options))
        settings_dict["OPTIONS"][name] = "project's"
        bound_silent_network(store)
        assert settings_dict["OPTIONS"] == {
            **store.worker_connection_options,
            "project": "own",
            name: "project's",
        }
    else:
        bound_silent_network(store)
        assert settings_dict["OPTIONS"] == {"project": "own"}


# -- retention: tally_pruned and prune_jobs ---------------------------------------------------


@pytest.mark.django_db
def test_tally_pruned_counts_only_ended_jobs_and_adds_to_what_is_there():
    store = get_store()
    a = make_job("t:a", kind="k.one")
    b = make_job("t:b", kind="k.one")
    c = make_job("t:c", state="failed", kind="k.two")
    live = make_job("t:live", state="queued", kind="k.one")
    store.tally_pruned([a.pk, b.pk, c.pk, live.pk])
    store.tally_pruned([a.pk])
    store.tally_pruned([])
    tally = {(p.kind, p.state): p.count for p in PrunedCount.objects.all()}
    assert tally == {("k.one", "succeeded"): 3, ("k.two", "failed"): 1}


class PruneJobsTests(HypothesisTestCase):
    """``prune_jobs`` on any mix of jobs: exactly the ended ones among the ids go, with their
    steps; their surviving children lose the link; the tally counts what went."""

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        jobs=st.lists(
            st.tuples(
                st.sampled_from(ENDED_STATES + LIVE_STATES),
                st.sampled_from(["k.a", "k.b"]),
                st.integers(0, 3),  # steps
                st.booleans(),  # among the ids to prune
                st.integers(0, 10),  # parent: an earlier job's index, when lower than own
            ),
            min_size=1,
            max_size=12,
        )
    )
    def test_prune_by_ids_deletes_ended_jobs_with_their_steps(self, jobs):
        store = get_store()
        PrunedCount.objects.all().delete()
        rows: list[Job] = []
        for n, (state, kind, steps, _, parent) in enumerate(jobs):
            row = make_job(
                f"p:{n}",
                state=state,
                kind=kind,
                parent=rows[parent] if parent < n else None,
            )
            JobStep.objects.bulk_create(
                JobStep(job=row, name=f"s{i}", seq=i, key=f"{row.pk}:{i}", state="completed")
                for i in range(steps)
            )
            rows.append(row)
        ids = [row.pk for row, spec in zip(rows, jobs, strict=True) if spec[3]]
        gone = {row.pk for row in rows if row.pk in ids and row.state in ENDED_STATES}

        with transaction.atomic():
            deleted = store.prune_jobs(ids)
        connection.check_constraints()  # what a commit checks: no link to a deleted row

        expected_steps = sum(
            spec[2] for row, spec in zip(rows, jobs, strict=True) if row.pk in gone
        )
        assert deleted == (len(gone), expected_steps)
        assert set(Job.objects.values_list("pk", flat=True)) == {r.pk for r in rows} - gone
        assert not JobStep.objects.filter(job_id__in=gone).exists()
        for row in Job.objects.all():
            before = next(r for r in rows if r.pk == row.pk)
            expected_parent = None if before.parent_id in gone else before.parent_id
            assert row.parent_id == expected_parent
        tally = Counter({(p.kind, p.state): p.count for p in PrunedCount.objects.all()})
        assert tally == Counter((r.kind, r.state) for r in rows if r.pk in gone)

    def test_prune_of_no_ids_runs_nothing(self):
        with CaptureQueriesContext(connection) as queries:
            assert get_store().prune_jobs([]) == (0, 0)
        assert len(queries) == 0


# -- locked reads -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_locked_children_and_locked_step_read_the_rows_afresh():
    store = get_store()
    parent = make_job("parent", state="running")
    kids = [make_job(f"kid:{s}", state=s, parent=parent) for s in ("failed", "queued", "cancelled")]
    make_job("stranger", state="failed")
    step = JobStep.objects.create(job=parent, name="s", seq=0, key="k", state="running")
    JobStep.objects.filter(pk=step.pk).update(state="completed", attempts=2)
    with transaction.atomic():
        found = store.locked_children(parent.pk, ["failed", "cancelled"])
        fresh = store.locked_step(step.pk)
    assert [k.pk for k in found] == [kids[0].pk, kids[2].pk]
    assert (fresh.state, fresh.attempts) == ("completed", 2)
