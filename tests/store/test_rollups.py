"""The charts' rollups: each finished minute closed once, counts and histograms right."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connections
from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_jobs.engine.maintenance import prune
from django_jobs.engine.maintenance.rollups import close_rollups
from django_jobs.histograms import bucket_of, histogram, merge, quantile
from django_jobs.models import Job, JobRollup, RollupMark
from tests.locks import held_open, on_another_connection

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def ended(
    at: datetime,
    *,
    state: str = "succeeded",
    queue: str = "default",
    kind: str = "app.a",
    runtime: float = 0.1,
    pickup: float = 0.5,
    attempts: int = 1,
    error: str | None = None,
) -> Job:
    started = at - timedelta(seconds=runtime)
    return Job.objects.create(
        kind=kind,
        queue=queue,
        state=state,
        attempts=attempts,
        created_at=started - timedelta(seconds=pickup),
        run_at=started - timedelta(seconds=pickup),
        started_at=started,
        ended_at=at,
        error=error,
    )


def minute_rows(**filters: object) -> list[JobRollup]:
    return list(JobRollup.objects.filter(span=60, **filters).order_by("minute", "queue", "kind"))


def test_a_finished_minute_is_counted_once_with_its_histograms() -> None:
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False) as traveller:
        close_rollups()  # the first close: marks where counting starts
        ended(T0 + timedelta(seconds=10), runtime=0.1, pickup=2.0)
        ended(T0 + timedelta(seconds=20), runtime=0.4, pickup=0.0)
        ended(T0 + timedelta(seconds=30), state="failed", error="JOB_TIMEOUT: stopped at 5s")
        ended(T0 + timedelta(seconds=40), state="failed", error="WORKER_LOST: process died")
        ended(T0 + timedelta(seconds=50), kind="app.b", queue="mail", attempts=2)
        ended(T0 + timedelta(seconds=70))  # the next minute
        Job.objects.create(kind="app.a", queue="default", state="queued", run_at=T0)
        traveller.move_to(T0 + timedelta(seconds=64))  # within the grace: not closed yet
        assert close_rollups() == 0
        traveller.move_to(T0 + timedelta(seconds=66))
        assert close_rollups() == 1
        assert close_rollups() == 0  # done: nothing to count again

    a, b = minute_rows(kind="app.a"), minute_rows(kind="app.b")
    assert [(r.minute, r.succeeded, r.failed, r.timeouts, r.lost) for r in a] == [(T0, 2, 2, 1, 1)]
    assert a[0].runtime[str(bucket_of(100))] == 3  # the two failures ran 0.1 s too
    assert a[0].runtime[str(bucket_of(400))] == 1
    assert a[0].pickup == {str(bucket_of(2000)): 1, "0": 1, str(bucket_of(500)): 2}
    assert (b[0].queue, b[0].succeeded, b[0].pickup) == ("mail", 1, {})  # a retry: no pickup
    (depth,) = minute_rows(kind="", queue="default")
    assert (depth.minute, depth.depth, depth.oldest_age_s) == (T0, 1, 66.0)
    assert minute_rows(kind="", queue="mail")[0].depth == 0


def test_workers_closing_together_do_not_count_twice() -> None:
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False) as traveller:
        close_rollups()
        for second in range(0, 60, 5):
            ended(T0 + timedelta(seconds=second))
        traveller.move_to(T0 + timedelta(minutes=1, seconds=6))
        # Two workers read the same mark: the second's conditional update finds it moved.
        closed = [close_rollups(), close_rollups(), close_rollups()]
    assert closed == [1, 0, 0]
    assert sum(r.succeeded for r in minute_rows(kind="app.a")) == 12
    assert RollupMark.objects.get().closed_until == T0 + timedelta(minutes=1)


def test_workers_closing_at_the_same_moment_on_threads_count_each_minute_once() -> None:
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False) as traveller:
        close_rollups()
        for minute in range(30):
            for second in (0, 20, 40):
                ended(T0 + timedelta(minutes=minute, seconds=second))
        traveller.move_to(T0 + timedelta(minutes=30, seconds=6))
        go = threading.Barrier(4)

        def worker() -> int:
            try:
                go.wait()
                return close_rollups()
            finally:
                connections.close_all()

        with ThreadPoolExecutor(4) as pool:
            closed = [f.result() for f in [pool.submit(worker) for _ in range(4)]]
    assert sorted(closed) == [0, 0, 0, 30]
    assert sum(r.succeeded for r in minute_rows(kind="app.a")) == 90
    assert len(minute_rows(kind="app.a")) == 30


@pytest.mark.skipif(connections["default"].vendor != "postgresql", reason="row locks")
def test_a_worker_whose_close_is_held_open_elsewhere_passes_rather_than_waits() -> None:
    # Another worker's first close inserted the mark and its transaction stays open (that
    # worker was cut off from the server mid-close): this worker's keeper must not wait for it.
    with held_open(lambda: RollupMark.objects.create(engine="default", closed_until=T0)):
        assert on_another_connection(close_rollups) == 0  # passed, within LOCK_WAIT
    with time_machine.travel(T0 + timedelta(minutes=2), tick=False):
        close_rollups()  # the holder rolled back: this worker inserts the mark itself
    assert RollupMark.objects.filter(engine="default").exists()


def test_a_stop_of_the_fleet_is_caught_up_and_hours_are_folded() -> None:
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False) as traveller:
        close_rollups()
        for minute in range(0, 150, 10):
            ended(T0 + timedelta(minutes=minute, seconds=1), runtime=minute + 1)
        traveller.move_to(T0 + timedelta(hours=3))
        assert close_rollups() == 60
        assert close_rollups() == 60
        assert close_rollups() == 59  # the last minute ends within the grace
    assert sum(r.succeeded for r in minute_rows()) == 15
    hours = list(JobRollup.objects.filter(span=3600, kind="app.a").order_by("minute"))
    assert [(h.minute, h.succeeded) for h in hours] == [(T0, 6), (T0 + timedelta(hours=1), 6)]
    assert quantile(hours[0].runtime, 1.0) == pytest.approx(51_000, rel=0.1)
    quarters = JobRollup.objects.filter(span=900, kind="app.a").order_by("minute")
    assert [(q.minute.hour, q.minute.minute, q.succeeded) for q in quarters][:3] == [
        (10, 0, 2), (10, 15, 1), (10, 30, 2)
    ]  # fmt: skip
    assert sum(q.succeeded for q in quarters) == 15


def test_rollups_are_pruned_with_the_jobs() -> None:
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False) as traveller:
        close_rollups()
        ended(T0 + timedelta(seconds=1))
        traveller.move_to(T0 + timedelta(days=2))
        while close_rollups():
            pass
        ended(T0 + timedelta(days=2, seconds=-50))
        assert JobRollup.objects.filter(minute=T0).exists()
        result = prune("1d")
    assert result.jobs == 1
    assert not JobRollup.objects.filter(minute__lt=T0 + timedelta(days=1)).exists()


durations = st.lists(st.floats(min_value=0.0, max_value=1e8, allow_nan=False), max_size=60)


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(durations, min_size=1, max_size=6), q=st.sampled_from([0.5, 0.95, 0.99]))
def test_percentiles_of_merged_rollups_are_those_of_all_the_values(
    parts: list[list[float]], q: float
) -> None:
    values = sorted(v for part in parts for v in part)
    merged = merge(histogram(part) for part in parts)
    assert merged == histogram(values)
    estimate = quantile(merged, q)
    if not values:
        assert estimate is None
        return
    exact = values[max(0, -(-len(values) * q // 1) - 1).__int__()]
    assert estimate is not None
    if exact >= 1.0:  # below 1 ms every duration shares bucket 0
        assert exact / 2 ** (1 / 4) <= estimate <= exact * 2 ** (1 / 4)


@settings(max_examples=25, deadline=None)
@example(runtimes_us=[1000, 1189, 1190, 2000, 4000, 8000, 999_999, 1_000_000])  # edges
@given(runtimes_us=st.lists(st.integers(min_value=0, max_value=10**10), min_size=1, max_size=8))
def test_the_database_buckets_durations_as_the_histograms_do(runtimes_us: list[int]) -> None:
    JobRollup.objects.all().delete()
    RollupMark.objects.all().delete()
    Job.objects.all().delete()
    with time_machine.travel(T0 + timedelta(seconds=5), tick=False) as traveller:
        close_rollups()
        for us in runtimes_us:
            ended(T0 + timedelta(seconds=30), runtime=us / 1e6)
        traveller.move_to(T0 + timedelta(minutes=1, seconds=6))
        close_rollups()
    (row,) = minute_rows(kind="app.a")
    assert row.runtime == histogram(us / 1000 for us in runtimes_us)
