"""The fleet's rows, in process: a worker's row (register, heartbeat, stop, lost, pruned after a
day), the job JSON's ``worker``, and paused queues passed over by the claim.

The real worker processes are in tests/integration/test_fleet_processes.py; here the clock is
moved with time_machine, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import io
import json
import os
import socket
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

import django_jobs
from django_jobs import operations
from django_jobs.engine.maintenance import prune_workers
from django_jobs.engine.rows import fleet
from django_jobs.engine.run.limits import claim_within_limits
from django_jobs.engine.worker.worker import Worker, make_worker_id
from django_jobs.exceptions import InvalidPayload, UnknownEngine
from django_jobs.models import Job, PausedQueue, worker_name, worker_pid
from django_jobs.models import Worker as WorkerRow
from django_jobs.serialize import job_json, job_text
from django_jobs.store import get_store
from django_jobs.store.base import ClaimSkip
from testproject.jobs import noop, record
from tests.conftest import claim, claim_request

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


# -- names ------------------------------------------------------------------------------------


def test_a_worker_id_starts_with_its_name_and_the_job_json_names_the_worker():
    default = make_worker_id("default")
    assert default.startswith(f"{socket.gethostname()}:{os.getpid()}:default:")
    assert worker_name(default) == f"{socket.gethostname()}:{os.getpid()}"
    named = make_worker_id("bulk", "web:1")
    assert named.startswith("web:1:bulk:")
    token = named.rsplit(":", 1)[1]
    assert len(token.split(".")[0]) == 8 and worker_pid(named) == os.getpid()
    assert worker_name(named) == "web:1"
    assert worker_name(None) is None


@pytest.mark.django_db
def test_a_running_job_s_json_has_its_worker_and_null_otherwise():
    job = noop.enqueue({"w": 1})
    assert job_json(job)["worker"] is None
    [claimed] = claim(make_worker_id("default", "box-7"))
    data = job_json(claimed)
    assert data["state"] == "running" and data["worker"] == "box-7"
    assert '"worker":"box-7"' in job_text(claimed)  # the events' text, from the same list
    claimed.state = "succeeded"
    assert job_json(claimed)["worker"] is None


# -- the worker's row -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_worker_writes_its_row_heartbeats_it_and_marks_it_stopped():
    with time_machine.travel(T0, tick=False) as clock:
        record.enqueue_many([{"n": n} for n in range(3)])
        worker = Worker(burst=True, scheduler=False, concurrency=2, name="box-1")
        worker.run()
        row = WorkerRow.objects.get(name="box-1")
        assert (row.hostname, row.pid, row.engine, row.queues) == (
            socket.gethostname(),
            os.getpid(),
            "default",
            [],
        )
        assert (row.processes, row.concurrency, row.version) == (1, 2, django_jobs.__version__)
        assert (row.started_at, row.state, row.jobs_running, row.jobs_done) == (
            T0,
            "stopped",
            0,
            3,
        )
        [data] = operations.workers()
        assert data["state"] == "stopped" and data["running_jobs"] == []

        # A running worker's heartbeat: one UPDATE of its row, with its counts.
        fleet.register("box-1", engine="default", concurrency=2)
        clock.shift(timedelta(seconds=7))
        worker.processed = 5
        with CaptureQueriesContext(connection) as queries:
            worker._beat_row()
        assert len(queries) == 1
        row.refresh_from_db()
        assert (row.heartbeat_at, row.state, row.jobs_done) == (
            T0 + timedelta(seconds=7),
            "running",
            5,
        )
        assert row.started_at == T0


@pytest.mark.django_db
def test_a_row_whose_heartbeat_is_older_than_the_lease_reads_lost(settings):
    settings.JOBS = {**settings.JOBS, "LEASE": "30s"}
    with time_machine.travel(T0, tick=False) as clock:
        fleet.register("box-2", queues=["mail"], concurrency=4, pid=4242, hostname="h")
        [job] = noop.enqueue_many([{"lost": 1}])
        claim(make_worker_id("default", "box-2"))
        [row] = operations.workers()
        assert row["state"] == "running" and row["running_jobs"] == [job.pk]
        assert (row["pid"], row["hostname"], row["queues"]) == (4242, "h", ["mail"])
        clock.shift(timedelta(seconds=29))
        assert operations.workers()[0]["state"] == "running"
        assert operations.workers()[0]["heartbeat_age_s"] == 29.0
        clock.shift(timedelta(seconds=2))
        assert operations.workers()[0]["state"] == "lost"
        # Stored as it was: lost is read, never written.
        assert WorkerRow.objects.get().state == "running"


@pytest.mark.django_db
def test_stopped_and_lost_rows_are_pruned_after_a_day_running_ones_kept():
    with time_machine.travel(T0, tick=False) as clock:
        fleet.register("stopped")
        fleet.mark("stopped", "stopped")
        fleet.register("lost")
        fleet.register("alive")
        clock.shift(timedelta(hours=23, minutes=59))
        fleet.beat("alive", jobs_running=0, jobs_done=0)
        assert prune_workers() == 0
        clock.shift(timedelta(minutes=2))
        fleet.beat("alive", jobs_running=1, jobs_done=9)
        assert prune_workers() == 2
        assert list(WorkerRow.objects.values_list("name", flat=True)) == ["alive"]


@pytest.mark.django_db
def test_a_heartbeat_writes_the_row_again_if_it_was_pruned():
    worker = Worker(scheduler=False, name="box-3")
    assert not WorkerRow.objects.exists()
    worker._beat_row()
    assert WorkerRow.objects.get().name == "box-3"


# -- paused queues ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_claim_passes_over_the_paused_queues_and_enqueue_is_still_accepted():
    with time_machine.travel(T0, tick=False):
        operations.pause_queue("mail", reason="SMTP down")
        paused = record.enqueue({"n": "paused"}, queue="mail")  # accepted
        other = record.enqueue({"n": "other"})
        assert fleet.paused_queues("default") == frozenset({"mail"})
        request = claim_request("w", limit=10)
        skip = ClaimSkip(queues=sorted(fleet.paused_queues("default")))
        from dataclasses import replace

        [claimed] = claim_within_limits(get_store(), replace(request, skip=skip))
        assert claimed.pk == other.pk
        assert Job.objects.get(pk=paused.pk).state == "queued"
        operations.resume_queue("mail")
        assert fleet.paused_queues("default") == frozenset()
        [claimed] = claim_within_limits(get_store(), request)
        assert claimed.pk == paused.pk


@pytest.mark.django_db
def test_paused_queues_pass_through_the_caps_path_too(settings):
    settings.JOBS = {**settings.JOBS, "CAPS": {"global": 10}}
    record.enqueue({"n": "m"}, queue="mail")
    other = record.enqueue({"n": "o"})
    from dataclasses import replace

    request = replace(claim_request("w", limit=10), skip=ClaimSkip(queues=["mail"]))
    assert [j.pk for j in claim_within_limits(get_store(), request)] == [other.pk]


@pytest.mark.django_db
@pytest.mark.parametrize("caps", [None, {"global": 10}], ids=["no caps", "caps"])
def test_run_until_idle_and_jobs_drain_pass_over_paused_queues_of_their_engine_only(settings, caps):
    # The in-process ways of running jobs honour pauses as a worker does: a test suite or an
    # operator's `jobs drain` never runs what the fleet was told to leave alone.
    from django.core.management import call_command

    from django_jobs.testing import run_until_idle
    from testproject.jobs import fleet as fleet_kind

    if caps is not None:
        settings.JOBS = {**settings.JOBS, "CAPS": caps}
    mail = record.enqueue({"n": "mail"}, queue="mail")
    other = record.enqueue({"n": "other"})
    elsewhere = fleet_kind.enqueue({"n": "fleet"})  # engine "fleet", queue "default"
    operations.pause_queue("mail")
    operations.pause_queue("default", engine="fleet")
    assert [j.pk for j in run_until_idle()] == [other.pk]
    err = io.StringIO()
    call_command("jobs", "drain", "--limit", "5", stdout=io.StringIO(), stderr=err)
    assert "passing over paused queues: mail (default), default (fleet)" in err.getvalue()
    assert Job.objects.get(pk=mail.pk).state == "queued"
    assert Job.objects.get(pk=elsewhere.pk).state == "queued"
    operations.resume_queue("default", engine="fleet")
    assert [j.pk for j in run_until_idle(engine="fleet")] == [elsewhere.pk]
    operations.resume_queue("mail")
    call_command("jobs", "drain", "--limit", "5", stdout=io.StringIO(), stderr=io.StringIO())
    assert Job.objects.get(pk=mail.pk).state == "succeeded"


@pytest.mark.django_db
def test_pause_is_per_engine_updates_its_reason_and_resume_says_whether_it_was_paused():
    with time_machine.travel(T0, tick=False):
        first = operations.pause_queue("mail", reason="one", paused_by="ops")
        assert first == {
            "queue": "mail",
            "engine": "default",
            "paused": True,
            "reason": "one",
            "paused_at": T0.isoformat(),
            "paused_by": "ops",
        }
        assert operations.pause_queue("mail", reason="two")["reason"] == "two"
        assert PausedQueue.objects.count() == 1
        assert fleet.paused_queues("fleet") == frozenset()
        assert operations.resume_queue("mail")["resumed"] is True
        assert operations.resume_queue("mail")["resumed"] is False


@pytest.mark.django_db
def test_pause_refuses_a_bad_name_or_an_unknown_engine_saying_what_to_do():
    with pytest.raises(InvalidPayload, match="jobs queues"):
        operations.pause_queue("")
    with pytest.raises(InvalidPayload, match="U\\+0007"):
        operations.pause_queue("a\x07b")
    with pytest.raises(UnknownEngine, match="JOBS\\['ENGINES'\\]"):
        operations.pause_queue("mail", engine="nope")
    assert not PausedQueue.objects.exists()


@pytest.mark.django_db
def test_the_queues_list_shows_paused_reason_and_counts_per_state():
    record.enqueue_many([{"n": n} for n in range(2)])
    record.enqueue({"n": "m"}, queue="mail")
    with time_machine.travel(T0, tick=False):
        operations.pause_queue("idle", reason="nothing yet")
        operations.pause_queue("mail", reason="SMTP down")
    rows = {(r["engine"], r["queue"]): r for r in operations.queues()}
    assert rows[("default", "default")]["paused"] is False
    assert rows[("default", "default")]["states"] == {"queued": 2}
    assert rows[("default", "mail")]["paused"] is True
    assert rows[("default", "mail")]["reason"] == "SMTP down"
    assert rows[("default", "mail")]["states"] == {"queued": 1}
    assert rows[("default", "idle")]["states"] == {}


@pytest.mark.django_db
def test_a_worker_hands_back_a_prefetched_job_of_a_queue_paused_since_its_claim():
    job = record.enqueue({"n": "prefetched"}, queue="mail")
    worker = Worker(scheduler=False, name="box-4")
    [claimed] = claim(worker.worker_id)
    worker.held = [None]
    worker.running[claimed.pk] = (claimed, None)  # as the claim loop holds it
    worker.in_flight = worker.unfinished = 1
    worker.paused = frozenset({"mail"})
    worker._execute(claimed, 0)
    job.refresh_from_db()
    assert (job.state, job.attempts, job.worker_id) == ("queued", 0, None)
    assert (worker.in_flight, worker.unfinished, worker.running) == (0, 0, {})


@pytest.mark.django_db
def test_a_worker_reads_the_paused_set_and_wakes_when_a_queue_resumes():
    worker = Worker(scheduler=False, name="box-5")
    operations.pause_queue("mail")
    worker._read_paused()
    assert worker.paused == frozenset({"mail"})
    worker.wake.clear()
    operations.resume_queue("mail")
    worker._read_paused()
    assert worker.paused == frozenset() and worker.wake.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_pause_and_a_resume_are_heard_by_listening_workers_once_committed():
    store = get_store()
    if not store.supports_listen:
        pytest.skip("this store does not listen: workers read the paused set every second")
    listener = store.listen_for_jobs("w")
    try:
        operations.pause_queue("mail")
        heard = listener.wait_notifications(30)
        assert heard == [(store.paused_channel, "default")]
        operations.resume_queue("mail")
        assert listener.wait_notifications(30) == [(store.paused_channel, "default")]
    finally:
        listener.close()


@pytest.mark.django_db
def test_explain_claim_shows_the_paused_queues_passed_over():
    assert operations.explain_claim()["paused"] == []
    plain = operations.explain_claim()["sql"]
    operations.pause_queue("mail")
    explained = operations.explain_claim()
    assert explained["paused"] == ["mail"] and '"mail"' in json.dumps(explained["params"])
    assert explained["sql"] != plain and "NOT (queue" in explained["sql"]


class PauseNamesTests(HypothesisTestCase):
    """Whatever text a queue name or a reason holds: refused with a message saying what to do,
    or paused, listed and resumed exactly as given; never a stored row that breaks a read."""

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(name=st.text(max_size=120), reason=st.text(max_size=50))
    def test_a_pause_is_refused_or_round_trips(self, name: str, reason: str) -> None:
        try:
            paused = operations.pause_queue(name, reason=reason)
        except InvalidPayload as exc:
            assert exc.message and not PausedQueue.objects.exists()
            return
        assert (paused["queue"], paused["reason"]) == (name, reason)
        assert fleet.paused_queues("default") == frozenset({name})
        [row] = [q for q in operations.queues() if q["paused"]]
        assert (row["queue"], row["reason"]) == (name, reason)
        assert operations.resume_queue(name)["resumed"] is True
        assert not PausedQueue.objects.exists()
