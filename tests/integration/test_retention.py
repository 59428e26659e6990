"""Retention: ended jobs older than a cutoff go, with their steps; live jobs never do.

Rows are bulk-inserted (``bulk_create`` in batches) so the 100,000-job prune runs on both
PostgreSQL and SQLite within the default run.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import count as itertools_count
from itertools import cycle, islice

import pytest
from django.db import connection
from django.test import override_settings

from django_jobs import InvalidDuration, retry
from django_jobs.engine.maintenance import prune, prune_expired, retention_period
from django_jobs.models import Job, JobStep
from django_jobs.states import ENDED_STATES, LIVE_STATES
from tests.conftest import analyze_as_autovacuum_would, requires_postgres
from tests.locks import held_open

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=45)
RECENT = NOW - timedelta(days=2)
SEED = 2000
BATCH = 2000


def make_jobs(
    count: int, *, states: tuple[str, ...], ended_at: datetime | None, tag: str, **fields
) -> list[int]:
    """Insert ``count`` jobs cycling through ``states``; return their ids.

    Up to ``SEED`` rows go in through ``bulk_create``; larger counts copy those rows with
    ``INSERT ... SELECT`` (one statement per copy, new idempotency keys), which keeps 100,000
    rows to a few seconds on both databases.
    """
    created = fields.pop("created_at", OLD - timedelta(hours=1))
    rows = [
        Job(
            kind="test.noop",
            state=state,
            idempotency_key=f"{tag}:{i}",
            attempts=1,
            max_attempts=1,
            created_at=created,
            run_at=created,
            started_at=created if state != "queued" else None,
            ended_at=ended_at,
            **fields,
        )
        for i, state in enumerate(islice(cycle(states), min(count, SEED)))
    ]
    seed = [job.pk for job in Job.objects.bulk_create(rows, batch_size=SEED)]
    quote = connection.ops.quote_name
    columns = [quote(f.column) for f in Job._meta.concrete_fields if not f.primary_key]
    selected = [f"{c} || %s" if c == quote("idempotency_key") else c for c in columns]
    table = connection.ops.quote_name(Job._meta.db_table)
    copied = len(seed)
    seed.sort()
    with connection.cursor() as cursor:
        for copy in itertools_count(1):
            if copied >= count:
                break
            take = min(len(seed), count - copied)
            # A plain range of the seed's ids (the seed rows are the only ones in it): no
            # subquery whose plan depends on what the table's statistics say at that moment.
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) "
                f"SELECT {', '.join(selected)} FROM {table} WHERE id >= %s AND id <= %s",
                [f"-copy{copy}", seed[0], seed[take - 1]],
            )
            copied += take
    ids = list(
        Job.objects.filter(idempotency_key__startswith=f"{tag}:").values_list("pk", flat=True)
    )
    assert len(ids) == count
    return ids


def make_steps(job_ids: list[int], per_job: int = 2) -> int:
    rows = [
        JobStep(
            job_id=job_id,
            name=f"step-{n}",
            seq=n,
            state="completed",
            value={"n": n},
            attempts=1,
            started_at=OLD,
            ended_at=OLD,
        )
        for job_id in job_ids
        for n in range(per_job)
    ]
    JobStep.objects.bulk_create(rows, batch_size=BATCH)
    return len(rows)


def analyze_the_job_tables() -> None:
    """As autovacuum would after a large insert. It matters for the teardown: the rollback
    first runs the deferred foreign-key check of every deleted job, and a connection keeps the
    plan of those checks until a table's statistics change. Made while an earlier test's
    table was nearly empty, that plan scans the whole table per check: 100,000 scans of
    100,000 rows, minutes instead of seconds."""
    analyze_as_autovacuum_would(Job, JobStep)


def steps_by_job(job_ids: list[int]) -> Counter[int]:
    return Counter(JobStep.objects.filter(job_id__in=job_ids).values_list("job_id", flat=True))


@pytest.fixture
def analyzed_again_at_the_end():
    """``ANALYZE`` once more as the test ends, inside its transaction, as autovacuum would
    after the prune: the statistics outlive the rollback, which would leave later tests a job
    table counted at 100,000 rows (the admin's unfiltered list then shows the planner's
    estimate instead of its count)."""
    yield
    analyze_the_job_tables()


# A planner test too: on PostgreSQL what it shows rests on the plans of a 100,000-row table,
# the same on every Django version (one PostgreSQL environment of .ci/run runs it).
@pytest.mark.planner
@pytest.mark.usefixtures("analyzed_again_at_the_end")
def test_pruning_100k_ended_jobs_leaves_every_live_job_and_its_steps():
    old_ended = make_jobs(100_000, states=ENDED_STATES, ended_at=OLD, tag="old")
    old_steps = make_steps(old_ended[::50])  # 2,000 ended jobs with 2 steps each
    # Live jobs, some carrying an old ended_at (a retried row, an import): never pruned.
    live = make_jobs(500, states=LIVE_STATES, ended_at=None, tag="live")
    live += make_jobs(250, states=LIVE_STATES, ended_at=OLD, tag="live-old")
    make_steps(live, per_job=3)
    recent = make_jobs(300, states=ENDED_STATES, ended_at=RECENT, tag="recent")
    make_steps(recent)
    live_steps_before = steps_by_job(live)
    live_rows_before = {j.pk: (j.state, j.ended_at) for j in Job.objects.filter(pk__in=live)}
    assert JobStep.objects.filter(job_id__in=old_ended).count() == old_steps == 4000
    analyze_the_job_tables()

    seen: list[tuple[int, int]] = []
    # Not timed: a wall-clock bound here measured the machine's load (the same code took 13 s
    # alone and 81 s beside two other test environments); the time of a prune belongs in bench/.
    result = prune("30d", now=NOW, progress=lambda done, total: seen.append((done, total)))

    assert (result.jobs, result.steps, result.more) == (100_000, 4000, False)
    assert result.cutoff == NOW - timedelta(days=30)
    assert not Job.objects.filter(pk__in=old_ended).exists()
    assert not JobStep.objects.filter(job_id__in=old_ended).exists()
    # Every live job and every step of it is still there, unchanged.
    assert {j.pk: (j.state, j.ended_at) for j in Job.objects.filter(pk__in=live)} == (
        live_rows_before
    )
    assert steps_by_job(live) == live_steps_before
    assert sum(live_steps_before.values()) == 750 * 3
    assert Job.objects.filter(pk__in=recent).count() == 300
    assert JobStep.objects.filter(job_id__in=recent).count() == 600
    assert Job.objects.count() == 750 + 300
    # Progress after every batch, ending at the total.
    assert seen[-1] == (100_000, 100_000)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert len(seen) == 50  # batches of DEFAULT_BATCH_SIZE (2,000)


def test_only_ended_states_older_than_the_cutoff_go():
    cutoff = NOW - timedelta(days=30)
    just_before = make_jobs(
        3, states=ENDED_STATES, ended_at=cutoff - timedelta(seconds=1), tag="before"
    )
    at_cutoff = make_jobs(3, states=ENDED_STATES, ended_at=cutoff, tag="at")
    live = make_jobs(5, states=LIVE_STATES, ended_at=OLD, tag="live")

    result = prune(timedelta(days=30), now=NOW)

    assert result.jobs == 3
    assert not Job.objects.filter(pk__in=just_before).exists()
    assert Job.objects.filter(pk__in=at_cutoff + live).count() == 8


def test_rows_without_ended_at_are_aged_by_their_latest_timestamp():
    # An imported ended row without ended_at: its derived end is its latest timestamp.
    old_import = make_jobs(1, states=("succeeded",), ended_at=None, tag="import-old")
    started_recently = make_jobs(1, states=("failed",), ended_at=None, tag="import-recent")
    Job.objects.filter(pk__in=started_recently).update(started_at=RECENT)
    no_timestamps = make_jobs(1, states=("cancelled",), ended_at=None, tag="bare")
    Job.objects.filter(pk__in=no_timestamps).update(created_at=None, run_at=None, started_at=None)

    result = prune("30d", now=NOW)

    assert result.jobs == 1
    assert not Job.objects.filter(pk__in=old_import).exists()
    assert Job.objects.filter(pk__in=started_recently + no_timestamps).count() == 2


def test_a_limit_stops_early_and_says_more_is_left():
    make_jobs(25, states=ENDED_STATES, ended_at=OLD, tag="old")
    first = prune("30d", now=NOW, batch_size=10, limit=12)
    assert (first.jobs, first.more) == (12, True)
    rest = prune("30d", now=NOW, batch_size=10, limit=100)
    assert (rest.jobs, rest.more) == (13, False)
    assert Job.objects.count() == 0


def test_bad_arguments_are_refused_with_what_to_write():
    with pytest.raises(InvalidDuration, match='"30s", "5m"'):
        prune("a month")
    with pytest.raises(ValueError, match="batch_size"):
        prune("1d", batch_size=0)


def test_prune_expired_applies_the_retention_setting():
    make_jobs(30, states=ENDED_STATES, ended_at=NOW - timedelta(days=8), tag="week")
    make_jobs(6, states=ENDED_STATES, ended_at=NOW - timedelta(days=1), tag="day")

    assert retention_period() is None
    assert prune_expired(NOW) is None  # RETENTION unset: keep everything
    assert Job.objects.count() == 36

    with override_settings(JOBS={"RETENTION": "7d"}):
        assert retention_period() == timedelta(days=7)
        partial = prune_expired(NOW, limit=20)
        assert (partial.jobs, partial.more) == (20, True)
        rest = prune_expired(NOW)
        assert (rest.jobs, rest.more) == (10, False)
        assert rest.cutoff == NOW - timedelta(days=7)
    assert Job.objects.count() == 6

    with (
        override_settings(JOBS={"RETENTION": "forever"}),
        pytest.raises(InvalidDuration, match=r'JOBS\["RETENTION"\]'),
    ):
        prune_expired(NOW)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_row_locked_by_a_concurrent_retry_is_skipped_not_lost():
    ids = make_jobs(5, states=("failed",), ended_at=OLD, tag="old")
    target = ids[0]
    # Held as retry() holds it, in a transaction of another connection.
    with held_open(lambda: Job.objects.select_for_update().get(pk=target)):
        result = prune("30d", now=NOW)  # never waits on the locked row
    assert result.jobs == 4
    assert list(Job.objects.values_list("pk", flat=True)) == [target]
    assert retry(target)["state"] == "queued"
