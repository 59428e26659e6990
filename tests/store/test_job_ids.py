"""Job ids drawn ahead (PostgreSQL): what lets an enqueue's one statement store the job's
``job.created`` row with its complete text (``store.postgres.JobIds``).

- a process's first enqueue draws ids with a statement of its own; the next are one each;
- ids in hand too long are dropped, so a job's id does not sort before jobs made since;
- a forked child never uses the ids its parent holds;
- an id in hand that a row already has (a sequence reset under the process) is replaced;
- ids drawn by several threads at once are taken in increasing order, whichever was kept first.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from django.db import connection, connections
from django.test import TransactionTestCase
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.engine.rows.publish import writer
from django_jobs.events.payloads import encode, event_data
from django_jobs.models import Job, JobEventRecord
from django_jobs.store.postgres import JobIds
from testproject.jobs import noop


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def created_rows_match(jobs: list[Job]) -> None:
    """Each job has exactly one job.created row, the text of the job as read back."""
    for job in jobs:
        [row] = JobEventRecord.objects.filter(job_id=job.pk, type="job.created")
        stored = Job.objects.get(pk=job.pk)
        assert row.data == encode(event_data("job.created", stored, stored.created_at))


@st.composite
def draws_kept_in_any_order(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    """Consecutive draws from one sequence (each a run of ids), in the order their threads
    kept them, which need not be the order they were drawn in; and the sizes taken after."""
    sizes = draw(st.lists(st.integers(1, 9), min_size=1, max_size=6))
    starts = [1 + sum(sizes[:n]) for n in range(len(sizes))]
    runs = [list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)]
    kept = draw(st.permutations(runs))
    takes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=20))
    return kept, takes


@given(draws_kept_in_any_order())
def test_ids_drawn_by_threads_at_once_are_taken_in_increasing_order(case):
    # Threads that enqueue at once each draw ids with a statement of their own; the one whose
    # statement returned last may keep its ids first. A batch must still get increasing ids,
    # as its job.created rows are stored in id order.
    kept, takes = case
    ids = JobIds(clock=Clock())
    for run in kept:
        ids.add("default", run)
    taken: list[int] = []
    for n in takes:
        got, _ = ids.take("default", n)
        taken += got or []
    assert taken == sorted(taken)
    assert taken + ids.held("default") == sorted(i for run in kept for i in run)


def draw_elsewhere() -> int:
    """An id drawn by another session, as another process's insert would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence('django_jobs_job', 'id'))")
        return cursor.fetchone()[0]


class IdsDrawnAheadTests(TransactionTestCase):
    def setUp(self) -> None:
        if connection.vendor != "postgresql":
            pytest.skip("PostgreSQL only: SQLite's insert returns its ids")
        from django_jobs.store import postgres

        self.clock = Clock()
        self.ids = postgres.JobIds(clock=self.clock)
        self.process_ids = postgres.job_ids  # the process's own, back after the test
        patcher = pytest.MonkeyPatch()
        patcher.setattr(postgres, "job_ids", self.ids)
        self.addCleanup(patcher.undo)
        self.addCleanup(writer.flush)

    def held(self) -> list[int]:
        return self.ids.held(connection.alias)

    def test_a_first_enqueue_draws_ids_then_each_is_one_statement(self):
        with self.assertNumQueries(2):  # the ids, then the insert
            first = noop.enqueue({"n": 0})
        assert len(self.held()) == self.ids.MIN_AHEAD
        jobs = [first]
        for n in range(1, 3 * self.ids.MIN_AHEAD):
            with self.assertNumQueries(1):  # each insert draws the ids of the next ones
                jobs.append(noop.enqueue({"n": n}))
        assert [job.pk for job in jobs] == sorted(job.pk for job in jobs)
        created_rows_match(jobs)

    def test_a_batch_larger_than_the_ids_in_hand_draws_its_own(self):
        noop.enqueue({"warm": True})
        with self.assertNumQueries(2):
            batch = noop.enqueue_many([{"n": n} for n in range(50)])
        with self.assertNumQueries(1):  # the same size again: drawn ahead by the last
            again = noop.enqueue_many([{"again": n} for n in range(50)])
        created_rows_match(batch + again)

    def test_ids_in_hand_too_long_are_dropped(self):
        noop.enqueue({"n": 0})
        in_hand = self.held()
        assert in_hand
        newer = draw_elsewhere()  # another process inserts meanwhile
        self.clock.now += self.ids.MAX_AGE / 2
        kept = noop.enqueue({"n": 1})
        assert kept.pk == in_hand[0]  # fresh enough: taken, one statement
        self.clock.now += self.ids.MAX_AGE + 0.1
        with self.assertNumQueries(2):
            late = noop.enqueue({"n": 2})
        assert late.pk > newer  # not an id older than jobs made since
        assert late.pk not in in_hand
        created_rows_match([kept, late])

    def test_forgotten_ids_are_drawn_again_from_a_restarted_sequence(self):
        noop.enqueue({"n": 0})
        assert self.held()
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE django_jobs_job RESTART IDENTITY CASCADE")
        # Event rows name their job by id, without a foreign key: those of the jobs just
        # emptied (job 1 among them, in a new test database) would match the ids given again.
        JobEventRecord.objects.all().delete()
        self.ids.forget()
        # The process's own ids came from the sequence before its restart too: kept, the
        # next tests could take one that the sequence gives again.
        self.process_ids.forget()
        assert self.held() == []
        with self.assertNumQueries(2):  # nothing in hand: the ids, then the insert
            first = noop.enqueue({"n": 1})
        assert first.pk == 1
        created_rows_match([first, noop.enqueue({"n": 2})])

    def test_an_id_in_hand_that_a_row_already_has_is_replaced(self):
        noop.enqueue({"n": 0})
        taken = self.held()[0]
        # A row got that id behind the process's back (the sequence was reset under it).
        Job.objects.create(id=taken, kind="other.kind", run_at=Job.objects.get().run_at)
        job = noop.enqueue({"n": 1})
        assert job.pk != taken and not job.deduped
        assert Job.objects.get(pk=taken).kind == "other.kind"
        assert not JobEventRecord.objects.filter(job_id=taken).exists()
        created_rows_match([job])

    # The writer thread lives on once started (here at once, as in a worker or a web process):
    # Python warns of any fork then. The child's writer starts afresh on the pid change.
    @pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
    def test_a_forked_child_never_uses_its_parents_ids(self):
        writer.submit_all([])
        noop.enqueue({"parent": 0})
        parents = set(self.held())
        assert parents
        connections.close_all()  # a forked child must open its own connection
        context = multiprocessing.get_context("fork")
        queue: Any = context.Queue()
        child = context.Process(target=_enqueue_in_child, args=(queue, 3))
        child.start()
        child_ids = queue.get(timeout=60)
        child.join(timeout=60)
        assert child.exitcode == 0
        assert not parents & set(child_ids)
        mine = [noop.enqueue({"parent": n}).pk for n in range(1, 4)]
        assert set(mine) <= parents  # the parent goes on with its own
        created_rows_match(list(Job.objects.filter(pk__in=[*child_ids, *mine])))


def _enqueue_in_child(queue: Any, n: int) -> None:
    try:
        queue.put([noop.enqueue({"child": i}).pk for i in range(n)])
    finally:
        writer.flush()
        connections.close_all()
