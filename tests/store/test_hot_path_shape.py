"""What keeps the hot path fast, asserted where it can silently regress (PostgreSQL only).

- ``enqueue()`` in autocommit is ONE round trip to the server: counted on the wire (libpq's
  protocol trace: one ``ReadyForQuery`` per request cycle), so a ``BEGIN``/``COMMIT``, a
  savepoint, a separate ``pg_notify`` or event insert, or a prepare done on every call would
  all show.
- the claim uses the partial claim index with a million ended rows in the table, as a
  custom plan and as the generic plan a prepared statement may switch to; and it can never
  plan a scan of the idempotency index, the other partial index that holds live jobs.
"""

from __future__ import annotations

import json
import re
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase, TransactionTestCase

from django_jobs import clock
from django_jobs.events.outbox import writer
from django_jobs.models import Job, JobEventRecord
from django_jobs.store import Claim, get_store
from django_jobs.store.postgres import job_ids
from testproject.jobs import noop
from tests.conftest import claim


def skip_unless_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")


def round_trips(action: Any) -> int:
    """How many request cycles ``action`` sent on the default connection (libpq trace)."""
    from psycopg.pq import Trace

    pgconn = connection.connection.pgconn
    with tempfile.NamedTemporaryFile("w+", suffix=".trace") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        try:
            action()
        finally:
            pgconn.untrace()
        lines = Path(trace.name).read_text().splitlines()
    return sum(1 for line in lines if re.match(r"B\t\d+\tReadyForQuery", line))


def job_id_sequence() -> tuple[int, bool]:
    """The job id sequence's state: its last value, and whether that value was drawn."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('django_jobs_job', 'id')")
        name = cursor.fetchone()[0]
        cursor.execute(f"SELECT last_value, is_called FROM {name}")
        return cursor.fetchone()


def set_job_id_sequence(last_value: int, is_called: bool) -> None:
    """Set the job id sequence, and drop the ids this process drew ahead from it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('django_jobs_job', 'id'), %s, %s)",
            [last_value, is_called],
        )
    job_ids.forget()


class EnqueueRoundTripTests(TransactionTestCase):
    def setUp(self) -> None:
        skip_unless_postgres()
        # The ids drawn ahead are dropped after JobIds.MAX_AGE seconds without an enqueue,
        # and the next enqueue then draws its own with a statement of its own. These tests
        # count an enqueue's round trips once warm: a loaded machine pausing this process
        # for that long must not count as one more. Held still for the test.
        saved_clock = job_ids.clock
        job_ids.clock = lambda: 0.0
        self.addCleanup(setattr, job_ids, "clock", saved_clock)

    def tearDown(self) -> None:
        writer.flush()

    def test_an_enqueue_in_autocommit_is_one_round_trip_with_live_events_on(self):
        # Django's default: psycopg never prepares on its own (prepare_threshold None).
        connection.ensure_connection()
        saved = connection.connection.prepare_threshold
        connection.connection.prepare_threshold = None
        jobs: list[Job] = []
        try:
            for i in range(3):  # warm: the connection, and whatever the engine sets up once
                jobs.append(noop.enqueue({"warm": i}))
            assert round_trips(lambda: jobs.append(noop.enqueue({"n": 1}))) == 1
            ten = lambda: jobs.extend(noop.enqueue({"n": n}) for n in range(2, 12))  # noqa: E731
            assert round_trips(ten) == 10
            assert len(jobs) == 14
        finally:
            connection.connection.prepare_threshold = saved
        # Each was stored with its one job.created event (live events are on in the test
        # project). Counted per job: an earlier test's writer may have left rows of its own.
        ids = sorted(job.pk for job in jobs)
        created = JobEventRecord.objects.filter(type="job.created", job_id__in=ids)
        assert sorted(created.values_list("job_id", flat=True)) == ids
        assert Job.objects.filter(pk__in=ids).count() == 14

    def test_with_a_prepare_threshold_still_one_round_trip_once_prepared(self):
        connection.ensure_connection()
        assert connection.connection.prepare_threshold is not None  # the test project's 5
        for i in range(8):
            noop.enqueue({"warm": i})
        assert round_trips(lambda: [noop.enqueue({"n": n}) for n in range(10)]) == 10

    def test_still_one_round_trip_as_the_ids_outgrow_int2_and_int4(self):
        # psycopg sends a Python int as the smallest integer type that holds it, and keeps a
        # prepared statement per (text, parameter types): an id that outgrows one would make
        # the same enqueue a new statement, prepared with a round trip of its own.
        self.addCleanup(set_job_id_sequence, *job_id_sequence())
        for bound in (2**15, 2**31):
            with self.subTest(bound=bound):
                self.ten_enqueues_up_to(bound)

    def ten_enqueues_up_to(self, bound: int) -> None:
        connection.close()  # a new connection: nothing prepared yet
        set_job_id_sequence(bound - 13, True)
        # The first draws 9 ids (bound - 12 ...), each next one draws one ahead: the tenth of
        # the measured enqueues gets the id ``bound``, the first that needs a wider type.
        # (A payload of its own for each bound: the kind's jobs are deduplicated by payload.)
        warm = [noop.enqueue({"warm": i, "bound": bound}) for i in range(3)]
        jobs: list[Job] = []
        ten = lambda: jobs.extend(noop.enqueue({"n": n, "bound": bound}) for n in range(10))  # noqa: E731
        assert round_trips(ten) == 10
        assert [job.pk for job in warm + jobs] == list(range(bound - 12, bound + 1))


class EnginePreparesTests(TransactionTestCase):
    """The engine prepares its own statements with Django's default options, and never
    where the settings say prepared statements must not be used (PgBouncer before 1.21)."""

    def setUp(self) -> None:
        skip_unless_postgres()
        self.saved = (dict(connection.settings_dict["OPTIONS"]), connection.settings_dict.copy())

    def tearDown(self) -> None:
        options, saved = self.saved
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        connection.settings_dict["OPTIONS"] = options
        writer.flush()

    def prepared_inserts_after_enqueues(self, **settings: Any) -> int:
        connection.close()
        options = settings.pop("OPTIONS", {})
        connection.settings_dict["OPTIONS"] = options
        connection.settings_dict.update(settings)
        for i in range(8):
            noop.enqueue({"n": i, "settings": repr(settings), "options": repr(options)})
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM pg_prepared_statements "
                "WHERE statement LIKE %s AND statement LIKE %s",
                ["%INSERT INTO django_jobs_job%", "%pg_notify%"],
            )
            return cursor.fetchone()[0]

    def test_prepared_with_the_default_options(self):
        assert self.prepared_inserts_after_enqueues() == 1
        # Django's own (client-side binding) queries are not prepared by the threshold set.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM pg_prepared_statements WHERE statement "
                "NOT LIKE %s AND statement NOT LIKE %s",
                ["%django_jobs_job%", "%django_jobs_jobevent%"],
            )
            assert cursor.fetchone()[0] == 0

    def test_prepared_with_a_threshold_of_the_users(self):
        assert self.prepared_inserts_after_enqueues(OPTIONS={"prepare_threshold": 100}) == 1

    def test_never_prepared_when_the_settings_forbid_it(self):
        assert self.prepared_inserts_after_enqueues(OPTIONS={"prepare_threshold": None}) == 0
        assert self.prepared_inserts_after_enqueues(DISABLE_SERVER_SIDE_CURSORS=True) == 0
        # Behind PgBouncer with a threshold of the user's: psycopg applies it, the engine
        # adds nothing (8 enqueues stay under 100).
        forbidden = {"DISABLE_SERVER_SIDE_CURSORS": True, "OPTIONS": {"prepare_threshold": 100}}
        assert self.prepared_inserts_after_enqueues(**forbidden) == 0


class ClaimNeverPreparedTests(TransactionTestCase):
    """The claim is planned on every execution, whatever prepares the engine and the user's
    threshold make: a generic plan made while the job table was empty (a new deployment, an
    idle worker) would scan the whole table once jobs arrive."""

    def setUp(self) -> None:
        skip_unless_postgres()

    def claims(self, n: int) -> None:
        store = get_store()
        for _ in range(n):
            now = clock.now()
            store.claim(
                Claim(
                    engine="default",
                    worker_id="w",
                    limit=8,
                    now=now,
                    leased_until=now + timedelta(1),
                )
            )

    def prepared_claims(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%FOR UPDATE SKIP LOCKED%"],
            )
            return cursor.fetchone()[0]

    def test_claims_on_an_empty_table_leave_no_plan_behind(self):
        connection.ensure_connection()
        for threshold in (0, 5):  # psycopg would prepare at once, or after 5 runs
            connection.connection.prepare_threshold = threshold
            self.claims(8)
            assert self.prepared_claims() == 0
        noop.enqueue_many([{"n": n} for n in range(20)])
        self.claims(1)
        assert Job.objects.filter(state="running").count() == 8  # it claims all the same
        assert self.prepared_claims() == 0


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


def numbered(sql: str) -> str:
    """The statement with ``$1, $2, ...`` for its ``%s``/``%b`` placeholders (for PREPARE)."""
    count = 0

    def number(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"${count}"

    return re.sub(r"%[sb]", number, sql).replace("%%", "%")


def vacuum_the_job_table(command: str) -> None:
    """``command`` (VACUUM, VACUUM ANALYZE) on the job table, outside any transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"{command} {Job._meta.db_table}")


def index_sizes() -> list[tuple[Any, ...]]:
    """Each index of the job table as the planner costs it: pages and rows from the last
    vacuum or analyze, and its pages now (an index keeps its pages after its rows go)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.relpages, c.reltuples, pg_relation_size(c.oid) / 8192 "
            "FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass ORDER BY c.relname",
            [Job._meta.db_table],
        )
        return cursor.fetchall()


def insert_ended_jobs(count: int) -> None:
    """``count`` ended jobs, a tenth failed, then ``ANALYZE``: the statistics count them and
    no live job."""
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (kind, queue, engine, state, priority, attempts, "
            "max_attempts, log, version, cancel_requested, wake_requested, run_at, "
            "created_at, started_at, ended_at, timestamps_derived) "
            "SELECT 'old.job', 'default', 'default', "
            "CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 1, 1, '[]', '', "
            "false, false, t, t, t, t, false "
            "FROM generate_series(1, %s) AS g, "
            "LATERAL (SELECT now() - g * interval '1 second' AS t) AS at",
            [count],
        )
        cursor.execute(f"ANALYZE {table}")


def the_claim_as_sent() -> tuple[str, list[Any], int]:
    """Claim the due jobs; return the claim statement as the store sent it, and how many
    jobs it claimed."""
    sent: list[tuple[str, list[Any]]] = []

    def capture(execute, sql, params, many, context):
        sent.append((sql, list(params)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        claimed = claim("w", limit=64, now=clock.now())
    [(sql, params)] = [(s, p) for s, p in sent if "FOR UPDATE SKIP LOCKED" in s]
    return sql, params, len(claimed)


def explain(cursor: Any, sql: str, params: list[Any]) -> Any:
    cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
    return cursor.fetchone()[0]


def nodes_of(explained: Any) -> list[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` result (parsed, or its text)."""
    plan = explained if isinstance(explained, list) else json.loads(explained)
    return plan_nodes(plan[0]["Plan"])


class ClaimPlanTests(TestCase):
    ENDED = 1_000_000

    @classmethod
    def setUpClass(cls) -> None:
        # Every rolled-back test before this one left dead entries in the job table's
        # partial indexes; a server vacuums them away (autovacuum, off on the test server).
        # Vacuumed first, the table is what a running server's would be. The vacuum leaves
        # the indexes' pages (an index keeps them): a failure's message shows each index's
        # pages and rows as the planner saw them.
        if connection.vendor == "postgresql":
            vacuum_the_job_table("VACUUM")
            cls.after_vacuum = index_sizes()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        # The rollback above took the million rows back, but not what ANALYZE wrote in place:
        # the table's row estimate, which the admin's job list shows instead of a count. And
        # the rows stay in the table, dead, until a vacuum. VACUUM ANALYZE mends both, as a
        # server's autovacuum would. (Deleting the rows in the test's transaction instead
        # queued a foreign-key check per row, fired by the test's teardown: 27 s.)
        vacuum_the_job_table("VACUUM ANALYZE")

    def setUp(self) -> None:
        skip_unless_postgres()

    @pytest.mark.planner
    def test_the_claim_uses_the_claim_index_with_a_million_ended_rows(self):
        table = Job._meta.db_table
        insert_ended_jobs(self.ENDED)
        noop.enqueue_many([{"due": i} for i in range(20)])
        sql, params, claimed = the_claim_as_sent()
        assert claimed == 20

        with connection.cursor() as cursor:
            custom = explain(cursor, sql, params)
            cursor.execute(f"PREPARE claim_plan_probe AS {numbered(sql)}")
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            marks = ", ".join(["%s"] * len(params))
            cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE claim_plan_probe ({marks})", params)
            generic = cursor.fetchone()[0]
            cursor.execute("DEALLOCATE claim_plan_probe")
        for name, found in (("custom", custom), ("generic", generic)):
            nodes = nodes_of(found)
            # The plan's outline first: a failure's message must name the index it chose.
            outline = [
                (n["Node Type"], n.get("Index Name") or n.get("Relation Name")) for n in nodes
            ]
            assert any(n.get("Index Name") == "django_jobs_claim_idx" for n in nodes), (
                name,
                outline,
                self.after_vacuum,
                index_sizes(),
            )
            assert not any(
                n["Node Type"] == "Seq Scan" and n.get("Relation Name") == table for n in nodes
            ), (name, outline)

    @pytest.mark.planner
    def test_the_claim_never_plans_a_scan_of_the_idempotency_index(self):
        """The one partial index a claim may use is the claim index. With it out of the
        way (dropped in this test's transaction), the statistics counting no live job and
        every due job holding a key, the claim still does not turn to the idempotency index
        (a full scan of every live job and a sort): its condition needs a key, which a
        claim never names."""
        insert_ended_jobs(20_000)
        noop.enqueue_many([{"due": i} for i in range(20)])
        assert all(job.idempotency_key for job in Job.objects.filter(state="queued"))
        with connection.cursor() as cursor:
            cursor.execute("DROP INDEX django_jobs_claim_idx")
        sql, params, claimed = the_claim_as_sent()
        assert claimed == 20
        with connection.cursor() as cursor:
            used = {n.get("Index Name") for n in nodes_of(explain(cursor, sql, params))} - {None}
        assert "django_jobs_live_key_uniq" not in used, used
