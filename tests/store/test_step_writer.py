"""The group commit of step rows (``engine.step_writer``), with real threads and connections.

To make rows queue behind a write, the test holds a lock the write needs (PostgreSQL: the
step table in SHARE mode; SQLite: the database's write lock) until the rows are queued.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import IntegrityError, connection, connections, transaction

from django_jobs import Retry, job
from django_jobs.engine.durable.step_writer import StepWriter
from django_jobs.engine.run.context import LiveState
from django_jobs.engine.run.executor import Executor
from django_jobs.kinds.registry import unregister
from django_jobs.models import JobStep
from django_jobs.store.base import StepRow
from testproject.models import Execution
from tests.conftest import claim, on_postgres, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _file_database() -> None:
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        pytest.skip("threads share the database only through a file (SQLITE_TEST_PATH)")


@pytest.fixture
def kind() -> Iterator[Any]:
    @job("unit.step_writer", idempotency_key="payload", retry=Retry(attempts=3, delay=0))
    def one_step(ctx):
        return ctx.step.run("a", lambda: f"done {ctx.payload['n']}")

    yield one_step
    unregister("unit.step_writer")


@contextlib.contextmanager
def writes_held() -> Iterator[None]:
    """Step inserts of other connections wait until the block ends (nothing is kept)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            if on_postgres():
                cursor.execute("LOCK TABLE django_jobs_jobstep IN SHARE MODE")
            else:  # any write takes SQLite's one write lock until the transaction ends
                Execution.objects.create(job_id=0, label="holds the write lock")
        yield
        transaction.set_rollback(True)


def in_thread(fn: Callable[[], Any], answers: dict[int, Any], slot: int) -> threading.Thread:
    """Run ``fn`` on a thread of its own (its own connection); its return or exception goes
    to ``answers[slot]``."""

    def run() -> None:
        try:
            answers[slot] = fn()
        except Exception as exc:
            answers[slot] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def grouped(writer: StepWriter, calls: list[Callable[[], Any]]) -> dict[int, Any]:
    """Run the first call alone, its write held back; queue the others behind it; then let
    the writes go. With one leader: the first call's row is one commit, the others' one."""
    answers: dict[int, Any] = {}
    with writes_held():
        threads = [in_thread(calls[0], answers, 0)]
        wait_until(lambda: writer.writing == 1, message="the first write never started")
        threads += [in_thread(call, answers, n) for n, call in enumerate(calls[1:], 1)]
        wait_until(lambda: writer.queued == len(calls) - 1, message="the rows never queued")
    for thread in threads:
        thread.join(timeout=60)
    return answers


def rows_for(jobs: list[Any]) -> list[StepRow]:
    return [
        StepRow(
            job_id=j.pk,
            name="a",
            seq=0,
            key=f"k{j.pk}",
            started_at=j.started_at,
            held=(j.worker_id, j.attempts),
            state="completed",
            value={"n": j.payload["n"]},
            ended_at=j.started_at,
        )
        for j in jobs
    ]


def test_rows_queued_behind_a_write_are_stored_in_one_commit(kind):
    kind.enqueue_many([{"n": n} for n in range(6)])
    jobs = sorted(claim("w", limit=6), key=lambda j: j.pk)
    writer = StepWriter("default", leaders=1)
    rows = rows_for(jobs)
    answers = grouped(writer, [lambda row=row: writer.insert(row) for row in rows])
    stored = {s.job_id: s for s in JobStep.objects.filter(job_id__in=[j.pk for j in jobs])}
    assert [answers[n] for n in range(6)] == [stored[j.pk].id for j in jobs]
    assert [stored[j.pk].value for j in jobs] == [{"n": n} for n in range(6)]
    assert (writer.commits, writer.rows) == (2, 6)  # the first row alone, then the five
    if on_postgres():  # rows of one transaction share their xmin
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT job_id, xmin::text FROM django_jobs_jobstep WHERE job_id = ANY(%s)",
                [[j.pk for j in jobs]],
            )
            xmin = dict(cursor.fetchall())
        assert len({xmin[j.pk] for j in jobs[1:]}) == 1 and xmin[jobs[0].pk] != xmin[jobs[1].pk]


def test_a_row_whose_run_lost_its_job_is_refused_alone(kind):
    kind.enqueue_many([{"n": n} for n in range(4)])
    jobs = sorted(claim("w", limit=4), key=lambda j: j.pk)
    rows = rows_for(jobs)
    rows[2].held = ("another worker", 1)
    writer = StepWriter("default", leaders=1)
    answers = grouped(writer, [lambda row=row: writer.insert(row) for row in rows])
    assert answers[2] is None  # refused: the caller raises LeaseLost
    assert all(isinstance(answers[n], int) for n in (0, 1, 3))
    stored = set(JobStep.objects.values_list("job_id", flat=True))
    assert stored == {jobs[0].pk, jobs[1].pk, jobs[3].pk}
    assert writer.commits == 2


def test_a_failed_group_write_fails_only_the_job_it_concerns(kind):
    kind.enqueue_many([{"n": n} for n in range(5)])
    jobs = sorted(claim("w", limit=5), key=lambda j: j.pk)
    # Another run stored job 3's step "a" meanwhile: its insert breaks the group's statement.
    clash = jobs[3]
    JobStep.objects.create(job_id=clash.pk, name="a", state="completed", value="theirs")
    writer = StepWriter("default", leaders=1)
    executor = Executor("w")

    def run(j):
        live = LiveState(j)
        live.step_writer = writer
        return lambda: executor.run(j, live)

    outcomes = grouped(writer, [run(j) for j in jobs])
    by_job = {o.job_id: o for o in outcomes.values()}
    bad = by_job.pop(clash.pk)
    assert bad.state == "queued"  # retried per the kind's policy, as any step error
    assert IntegrityError.__name__ in bad.error
    assert {pk: (o.state, o.result) for pk, o in by_job.items()} == {
        j.pk: ("succeeded", f"done {j.payload['n']}") for j in jobs if j is not clash
    }
    values = dict(JobStep.objects.values_list("job_id", "value"))
    assert values == {j.pk: f"done {j.payload['n']}" for j in jobs if j is not clash} | {
        clash.pk: "theirs"
    }
