"""``job.created`` of a job enqueued inside the caller's transaction, on PostgreSQL: staged by
the insert and stored by the caller's commit (``store/staged_events.py``).

- one commit: after the caller's commit, no statement of ours runs (it used to store the rows
  in a second transaction);
- a rollback stores nothing, a deduped job stages nothing, a batch of 1,000 is stored whole;
- the fleet publisher gets the rows as the commit stored them, ids and texts;
- ``Last-Event-ID`` replay stays exact: a client reconnecting again and again while 1,000 jobs
  are enqueued in concurrent transactions misses none and gets none twice.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction
from django.test import TransactionTestCase
from django.test.utils import CaptureQueriesContext

from django_jobs.events.payloads import OPERATORS_CHANNEL
from django_jobs.events.streams import replay
from django_jobs.models import Job, JobEventRecord
from django_jobs.signals import event_rows_stored
from django_jobs.store import events as event_store
from django_jobs.store.staged_events import STAGED_TABLE, staging_table
from testproject.jobs import noop

from ..conftest import requires_postgres
from .test_job_ids import created_rows_match

pytestmark = requires_postgres


class Rollback(Exception):
    pass


def staged_left() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {STAGED_TABLE}")
        return cursor.fetchone()[0]


class StagedCreatedTests(TransactionTestCase):
    def test_the_enqueue_is_one_statement_of_the_callers_transaction_and_its_commit(self):
        noop.enqueue({"warm": 1})  # the process's first enqueue draws job ids ahead

        def statements(queries: CaptureQueriesContext) -> list[str]:
            # Django 6 logs the transaction's own BEGIN and COMMIT; 5.2 does not, and logs a
            # server-bound statement (ours) without its text (None): "?" then.
            texts = ["?" if q["sql"] is None else q["sql"][:60] for q in queries]
            return [text for text in texts if text not in ("BEGIN", "COMMIT")]

        with CaptureQueriesContext(connection) as queries:
            with transaction.atomic():
                job = noop.enqueue({"in": "atomic"})
                # One statement: no savepoint, no event insert of its own.
                [insert] = statements(queries)
                assert insert == "?" or insert.startswith('QUERY = "WITH src AS'), insert
                assert not JobEventRecord.objects.filter(job_id=job.pk).exists()
                inside = statements(queries)
            # After the commit nothing of ours runs (the rows used to be stored then).
            assert statements(queries) == inside and len(inside) == 2
        created_rows_match([job])
        assert staged_left() == 0

    def test_before_the_table_is_made_job_created_follows_the_commit(self):
        # A deploy that runs the new code before ``migrate``: no staging table yet.
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute(f"DROP TABLE {STAGED_TABLE}")
                staging_table.forget()
                assert not staging_table.ready(connection.alias)
                with transaction.atomic():
                    job = noop.enqueue({"before": "migrate"})
                assert Job.objects.filter(pk=job.pk).exists()
                raise Rollback
        except Rollback:
            pass
        staging_table.forget()
        assert staging_table.ready(connection.alias) and staged_left() == 0

    def test_a_rollback_stores_nothing_and_a_deduped_job_stages_nothing(self):
        with pytest.raises(RuntimeError), transaction.atomic():
            noop.enqueue({"rolled": "back"})
            raise RuntimeError("roll back")
        assert not JobEventRecord.objects.exists() and staged_left() == 0
        first = noop.enqueue({"same": 1})
        with transaction.atomic():
            again = noop.enqueue({"same": 1})
            other = noop.enqueue({"other": 1})
        assert again.deduped and again.pk == first.pk
        rows = JobEventRecord.objects.filter(type="job.created").order_by("id")
        assert [row.job_id for row in rows] == [first.pk, other.pk]

    def test_a_batch_of_a_thousand_is_stored_whole_in_job_id_order(self):
        with transaction.atomic():
            jobs = noop.enqueue_many([{"n": n} for n in range(1000)])
            more = noop.enqueue({"after": "the batch"})
        rows = list(JobEventRecord.objects.filter(type="job.created").order_by("id"))
        assert [row.job_id for row in rows] == sorted(j.pk for j in [*jobs, more])
        created_rows_match([jobs[0], jobs[-1], more])
        assert staged_left() == 0

    def test_the_fleet_gets_the_rows_as_the_commit_stored_them(self):
        received: list[list] = []

        def receiver(sender, *, rows, **kwargs):
            received.append(list(rows))

        event_rows_stored.connect(receiver)
        try:
            with transaction.atomic():
                jobs = noop.enqueue_many([{"n": n} for n in range(3)])
        finally:
            event_rows_stored.disconnect(receiver)
        [rows] = received
        stored = JobEventRecord.objects.filter(type="job.created").order_by("id")
        assert [(r.id, r.job_id, r.data) for r in rows] == [
            (s.id, s.job_id, s.data) for s in stored
        ]
        assert [r.job_id for r in rows] == [j.pk for j in jobs]


class ReplayAcrossConcurrentTransactionsTests(TransactionTestCase):
    WRITERS = 8
    PER_WRITER = 125  # 1,000 jobs

    def setUp(self):
        # Each writer's transaction ends with a row here, whose own deferred trigger fires
        # after the staged rows' (deferred triggers fire in the order they were queued) and
        # holds the commit for up to 10 ms: the time between drawing the event ids and the
        # commit, in which ids drawn without the write lock would commit out of order.
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE test_slow_commit (id serial PRIMARY KEY)")
            cursor.execute(
                "CREATE FUNCTION test_slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_sleep(random() * 0.01); RETURN NULL; END $$"
            )
            cursor.execute(
                "CREATE CONSTRAINT TRIGGER test_slow_commit AFTER INSERT ON test_slow_commit "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_slow_commit()"
            )

    def tearDown(self):
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE test_slow_commit")
            cursor.execute("DROP FUNCTION test_slow_commit()")

    def test_a_reconnecting_client_misses_nothing_and_gets_nothing_twice(self):
        noop.enqueue({"warm": 1})
        start = event_store.latest_id(connection.alias)
        made: list[int] = []
        done = threading.Event()
        failures: list[BaseException] = []

        def write(writer: int) -> None:
            try:
                for n in range(self.PER_WRITER):
                    with transaction.atomic():
                        job = noop.enqueue({"writer": writer, "n": n})
                        with connection.cursor() as cursor:
                            cursor.execute("INSERT INTO test_slow_commit DEFAULT VALUES")
                    made.append(job.pk)
            except BaseException as error:  # pragma: no cover - reported below
                failures.append(error)
            finally:
                connections.close_all()

        seen: list[int] = []

        def reconnect(last_id: int) -> int:
            """One reconnection with ``Last-Event-ID: last_id``: the replay, in full."""
            upto = event_store.latest_id(connection.alias)
            while True:
                got = replay(OPERATORS_CHANNEL, last_id, upto)
                seen.extend(sorted(got.ids))
                last_id = got.last_id
                if not got.more:
                    return last_id

        writers = [threading.Thread(target=write, args=(w,)) for w in range(self.WRITERS)]
        for thread in writers:
            thread.start()

        def join_writers() -> None:
            for thread in writers:
                thread.join()
            done.set()

        threading.Thread(target=join_writers).start()
        last, reconnections = start, 0
        while not done.is_set():
            last = reconnect(last)
            reconnections += 1
        last = reconnect(last)
        assert not failures, failures
        assert len(made) == self.WRITERS * self.PER_WRITER
        assert len(seen) == len(set(seen)), "an event was sent twice"
        got = dict(
            JobEventRecord.objects.filter(id__in=seen).values_list("id", "job_id").iterator()
        )
        assert sorted(got[event_id] for event_id in seen) == sorted(made), "an event was missed"
        assert seen == sorted(seen)
        assert reconnections > 1
