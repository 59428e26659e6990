"""``manage.py jobs <command>`` on real rows: JSON output checked against the tables, exit codes.

In-process runs use ``call_command`` (a ``CommandError`` carries the exit status as
``returncode``); the last tests run ``manage.py jobs`` as a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from django_jobs import Uncertain, job, operations
from django_jobs.cli import EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_REFUSED
from django_jobs.engine.schedules.cron import next_runs
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobStep, Schedule
from django_jobs.observability.stats import queue_stats
from django_jobs.serialize import job_json
from django_jobs.testing import run_until_idle
from testproject.jobs import always_fail, keeps_requeueing, noop, record, slow, validated
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def jobs(*args: object) -> tuple[str, str]:
    """Run ``manage.py jobs *args`` in-process; return (stdout, stderr)."""
    out, err = StringIO(), StringIO()
    call_command("jobs", *[str(a) for a in args], stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def jobs_json(*args: object) -> object:
    out, _ = jobs(*args, "--json")
    return json.loads(out)


def refused(*args: object) -> CommandError:
    with pytest.raises(CommandError) as info:
        jobs(*args)
    return info.value


def rows(queryset) -> list[dict]:
    return [job_json(j) for j in queryset]


@pytest.fixture
def charge_kind() -> Iterator[object]:
    """A kind with durable steps whose second step is uncertain on its first run."""
    calls: list[str] = []

    @job("cli.charge", idempotency_key="payload")
    def charge(ctx):
        ctx.log("fetching the order")
        order = ctx.step.run("fetch", lambda: {"order": ctx.payload["order"]})
        ctx.progress("charging", 50)

        def pay():
            calls.append("pay")
            if len(calls) == 1:
                raise Uncertain("the provider timed out; the charge may have gone through")
            return {"paid": True}

        paid = ctx.step.run("pay", pay)
        ctx.log("charged")
        return {**order, **paid}

    yield charge
    unregister("cli.charge")


# --- list and inspect -----------------------------------------------------------------------


def test_list_prints_the_newest_jobs_as_job_json_and_as_a_table():
    with time_machine.travel(T0, tick=False):
        for n in range(3):
            record.enqueue({"n": n})
        failing = always_fail.enqueue({"pad": 0})
        noop.enqueue({"x": 1}, queue="bulk")
        run_until_idle(max_jobs=2)

        listed = jobs_json("list")
        assert listed == rows(Job.objects.order_by("-id"))
        assert [r["id"] for r in listed] == sorted((r["id"] for r in listed), reverse=True)
        assert set(listed[0]) >= {"id", "kind", "state", "payload", "progress", "attempts"}

        assert jobs_json("list", "--state", "queued") == rows(
            Job.objects.filter(state="queued").order_by("-id")
        )
        assert jobs_json("list", "--kind", "test.fail") == rows(Job.objects.filter(pk=failing.pk))
        assert [r["queue"] for r in jobs_json("list", "--queue", "bulk")] == ["bulk"]
        assert len(jobs_json("list", "--limit", 2)) == 2

        out, err = jobs("list")
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID",
        "KIND",
        "QUEUE",
        "STATE",
        "ATTEMPTS",
        "PROGRESS",
        "AGE",
        "NOTE",
    ]
    assert len(lines) == 1 + Job.objects.count() and err == ""
    assert any(
        line.split()[:4] == [str(failing.pk), "test.fail", "default", "queued"] for line in lines
    )


def test_list_refuses_an_unknown_state_with_exit_2():
    error = refused("list", "--state", "done")
    assert error.returncode == EXIT_BAD_INPUT
    assert "BAD_INPUT" in str(error) and "queued, running" in str(error)


def test_inspect_shows_the_row_steps_and_log(charge_kind):
    with time_machine.travel(T0, tick=False):
        job_ = charge_kind.enqueue({"order": 7})
        [ran] = run_until_idle()
    assert ran.state == "unknown"

    detail = jobs_json("inspect", job_.pk)
    assert detail == operations.inspect_job(job_.pk)
    assert [(s["name"], s["state"]) for s in detail["steps"]] == [
        ("fetch", "completed"),
        ("pay", "failed"),
    ]
    assert detail["log"] == ["fetching the order"]
    assert detail["progress"] == {"stage": "charging", "percent": 50}

    out, _ = jobs("inspect", job_.pk)
    assert f"Job #{job_.pk}" in out and "unknown" in out
    assert "fetch" in out and "completed" in out and "fetching the order" in out
    assert "the provider timed out" in out


def test_inspect_of_an_unknown_id_exits_3():
    error = refused("inspect", 424242)
    assert error.returncode == EXIT_NOT_FOUND
    assert "JOB_NOT_FOUND" in str(error) and "424242" in str(error)


# --- retry, cancel, resolve -----------------------------------------------------------------


def test_a_refused_retry_exits_4_with_the_reason():
    done = record.enqueue({"n": "done"})
    run_until_idle()
    error = refused("retry", done.pk)
    assert error.returncode == EXIT_REFUSED
    assert "NOT_RETRYABLE" in str(error) and "only failed, blocked or cancelled" in str(error)
    assert Job.objects.get(pk=done.pk).state == "succeeded"
    assert refused("retry", 999999).returncode == EXIT_NOT_FOUND


def test_retry_queues_a_dead_letter_again():
    with time_machine.travel(T0, tick=False) as clock:
        dead = always_fail.enqueue({"pad": 1})
        for _ in range(3):
            run_until_idle()
            clock.shift(timedelta(minutes=5))
        assert Job.objects.get(pk=dead.pk).state == "failed"

        row = jobs_json("retry", dead.pk)
    assert row == job_json(Job.objects.get(pk=dead.pk))
    assert row["state"] == "queued" and row["error"] is None and row["max_attempts"] == 6


def test_retry_from_a_step_forgets_it_and_the_ones_after(charge_kind):
    with time_machine.travel(T0, tick=False):
        job_ = charge_kind.enqueue({"order": 1})
        run_until_idle()
        operations.cancel(job_.pk)  # unknown -> cancelled, so it may be retried
        out, _ = jobs("retry", job_.pk, "--from-step", "pay")
    assert f"Job #{job_.pk} (cli.charge) is queued again" in out
    assert list(JobStep.objects.filter(job=job_).values_list("name", flat=True)) == ["fetch"]
    error = refused("retry", job_.pk, "--from-step", "nope")
    assert error.returncode == EXIT_REFUSED


def test_cancel_then_a_refused_second_cancel():
    queued = record.enqueue({"n": "cancel me"})
    row = jobs_json("cancel", queued.pk)
    assert row["state"] == "cancelled" and row == job_json(Job.objects.get(pk=queued.pk))
    error = refused("cancel", queued.pk)
    assert error.returncode == EXIT_REFUSED
    assert "NOT_CANCELLABLE" in str(error) and "already ended" in str(error)


def test_resolve_an_uncertain_step_then_drain_finishes_the_job(charge_kind):
    job_ = charge_kind.enqueue({"order": 9})
    run_until_idle()
    assert (
        refused(
            "resolve", job_.pk, "--step", "pay", "--as", "completed", "--value", "{nope"
        ).returncode
        == EXIT_BAD_INPUT
    )

    row = jobs_json(
        "resolve", job_.pk, "--step", "pay", "--as", "completed", "--value", '{"paid": "by hand"}'
    )
    assert row["state"] == "queued"
    assert JobStep.objects.get(job=job_, name="pay").value == {"paid": "by hand"}

    [ran] = jobs_json("drain")
    assert ran["id"] == job_.pk and ran["state"] == "succeeded"
    assert ran["result"] == {"order": 9, "paid": "by hand"}  # the resolved value, replayed
    assert refused("resolve", job_.pk, "--step", "missing", "--as", "failed").returncode == (
        EXIT_REFUSED
    )


# --- drain, stats, kinds, wake, schedules ---------------------------------------------------


def test_drain_runs_due_jobs_up_to_the_limit_and_reports_them():
    mine = [record.enqueue({"n": n}, queue="reports") for n in range(3)]
    other = record.enqueue({"n": "other"})

    out, err = jobs("drain", "--limit", 2, "--queue", "reports", "--json")
    ran = json.loads(out)
    assert [r["id"] for r in ran] == [j.pk for j in mine[:2]]
    assert all(r["state"] == "succeeded" for r in ran)
    assert ran == rows(Job.objects.filter(pk__in=[j.pk for j in mine[:2]]).order_by("id"))
    assert err.splitlines() == [
        f"ran 1/2: #{mine[0].pk} test.record -> succeeded",
        f"ran 2/2: #{mine[1].pk} test.record -> succeeded",
    ]

    out, _ = jobs("drain")
    assert "Ran 2 job(s): 2 succeeded." in out
    assert Job.objects.get(pk=other.pk).state == "succeeded"
    out, err = jobs("drain")
    assert out.strip() == "Nothing is due." and err == ""
    assert refused("drain", "--engine", "nope").returncode == EXIT_BAD_INPUT


def test_stats_prints_what_the_stats_endpoint_returns():
    with time_machine.travel(T0, tick=False) as clock:
        record.enqueue({"n": 1})
        always_fail.enqueue({"pad": 0}, queue="other")
        clock.shift(timedelta(seconds=30))
        run_until_idle(max_jobs=1)
        clock.shift(timedelta(seconds=5))
        stats = jobs_json("stats")
        assert stats == queue_stats()
        out, _ = jobs("stats")
    by_queue = {q["queue"]: q for q in stats["queues"]}
    assert by_queue["other"]["oldest_due_age_s"] == 35.0
    assert stats["pickup_latency_ms"]["sample"] == 1
    assert out.splitlines()[0].split()[:3] == ["QUEUE", "QUEUED", "RUNNING"]
    assert "Pickup latency (last 1 started): p50 30.0s" in out


def test_kinds_prints_the_manifest():
    kinds = jobs_json("kinds")
    assert kinds == operations.describe_kinds()
    assert {"test.record", "demo.render"} <= {k["kind"] for k in kinds}
    out, _ = jobs("kinds")
    assert out.splitlines()[0].split()[:2] == ["KIND", "LABEL"]
    assert "Render a video" in out


def test_wake_re_asks_waiting_jobs():
    with time_machine.travel(T0, tick=False) as clock:
        waiting = keeps_requeueing.enqueue({"n": 1})
        run_until_idle()
        assert Job.objects.get(pk=waiting.pk).run_at == T0 + timedelta(hours=1)
        clock.shift(timedelta(minutes=5))
        assert jobs_json("wake") == {"woken": 1}
        assert Job.objects.get(pk=waiting.pk).run_at == T0 + timedelta(minutes=5)
        [ran] = run_until_idle()  # due now: it runs, and asks to wait again
        assert ran.pk == waiting.pk and ran.state == "waiting"
        assert jobs("wake")[0] == "Woke 1 waiting job(s).\n"
    assert jobs_json("wake") == {"woken": 1}  # still waiting: nothing claimed it since


def test_schedules_lists_the_next_three_runs():
    Schedule.objects.create(
        name="nightly", cron="0 3 * * *", tz="Europe/Paris", kind="test.noop", payload={}
    )
    Schedule.objects.create(
        name="paused", cron="*/5 * * * *", tz="UTC", kind="test.noop", enabled=False
    )
    Schedule.objects.create(name="broken", cron="0 3 * * *", tz="Mars/Olympus", kind="test.noop")
    Schedule.objects.create(
        name="refused",
        cron="0 3 * * *",
        tz="UTC",
        kind="test.noop",
        enabled=False,
        paused_reason="Paused: its owner's account is inactive.",
    )
    with time_machine.travel(T0, tick=False):
        listed = {row["name"]: row for row in jobs_json("schedules")}
        out, _ = jobs("schedules")
    assert listed["nightly"]["next_runs"] == [
        t.isoformat() for t in next_runs("0 3 * * *", "Europe/Paris", T0, 3)
    ]
    assert listed["nightly"]["next_runs"][0] == "2026-03-02T02:00:00+00:00"
    assert listed["paused"]["next_runs"] == [] and listed["paused"]["enabled"] is False
    assert listed["broken"]["next_runs"] == [] and "Mars/Olympus" in listed["broken"]["error"]
    assert "2026-03-02 02:00:00" in out and "paused" in out and "invalid:" in out
    assert listed["refused"]["paused_reason"] == "Paused: its owner's account is inactive."
    assert "Paused: its owner's account is inactive." in out


# --- prune ----------------------------------------------------------------------------------


def test_prune_deletes_old_ended_jobs_only_with_progress_on_stderr(charge_kind):
    with time_machine.travel(T0, tick=False) as clock:
        old = [record.enqueue({"n": n}) for n in range(5)]
        stuck = charge_kind.enqueue({"order": 3})  # ends "unknown": live, with steps
        run_until_idle()
        clock.shift(timedelta(days=31))
        recent = record.enqueue({"n": "recent"})
        queued = record.enqueue({"n": "queued"}, delay="1h")
        run_until_idle()

        dry = jobs_json("prune", "--older-than", "30d", "--dry-run")
        assert (dry["jobs"], dry["steps"]) == (5, 0)
        out, err = jobs("prune", "--older-than", "30d", "--batch-size", 2, "--json")

    result = json.loads(out)
    assert result == {
        "cutoff": (T0 + timedelta(days=1)).isoformat(),
        "jobs": 5,
        "steps": 0,
        "more": False,
    }
    assert err.splitlines() == ["pruned 2/5", "pruned 4/5", "pruned 5/5"]
    assert not Job.objects.filter(pk__in=[j.pk for j in old]).exists()
    assert set(Job.objects.values_list("pk", flat=True)) == {stuck.pk, recent.pk, queued.pk}
    assert JobStep.objects.filter(job=stuck).count() == 2


def test_prune_needs_an_age_and_refuses_a_bad_one():
    error = refused("prune")
    assert error.returncode == EXIT_BAD_INPUT and "--older-than 30d" in str(error)
    error = refused("prune", "--older-than", "a month")
    assert error.returncode == EXIT_BAD_INPUT and "INVALID_DURATION" in str(error)


# --- enqueue --------------------------------------------------------------------------------


def test_enqueue_with_a_json_payload_then_deduped():
    row = jobs_json("enqueue", "test.record", "--payload", '{"n": 5}')
    created = Job.objects.get(pk=row["id"])
    assert row == job_json(created, deduped=False)
    assert created.payload == {"n": 5} and created.state == "queued"
    again = jobs_json("enqueue", "test.record", "--payload", '{"n": 5}')
    assert again["id"] == row["id"] and again["deduped"] is True
    out, _ = jobs("enqueue", "test.noop", "--queue", "bulk", "--priority", -5)
    assert "Enqueued job #" in out
    assert Job.objects.filter(kind="test.noop", queue="bulk", priority=-5).exists()


def test_enqueue_refusals_have_distinct_exit_codes():
    unknown = refused("enqueue", "no.such.kind")
    assert unknown.returncode == EXIT_NOT_FOUND and "UNKNOWN_KIND" in str(unknown)
    bad_json = refused("enqueue", "test.record", "--payload", "{'single': 'quotes'}")
    assert bad_json.returncode == EXIT_BAD_INPUT and "not valid JSON" in str(bad_json)
    invalid = refused("enqueue", validated.kind, "--payload", '{"order": 0}')
    assert invalid.returncode == EXIT_BAD_INPUT and "INVALID_PAYLOAD" in str(invalid)
    assert not Job.objects.exists()


# --- a real process -------------------------------------------------------------------------


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "jobs", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.process
def test_a_real_process_prints_json_and_exits_with_the_documented_codes(worker_env):
    done = record.enqueue({"n": "subprocess"})
    run_until_idle()
    waiting = record.enqueue({"n": "queued"})

    listed = manage(worker_env, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == rows(Job.objects.order_by("-id"))  # stdout is only JSON
    assert [r["id"] for r in json.loads(listed.stdout)] == [waiting.pk, done.pk]

    retry = manage(worker_env, "retry", str(done.pk))
    assert retry.returncode == EXIT_REFUSED and retry.stdout == ""
    assert "NOT_RETRYABLE" in retry.stderr and f"Job #{done.pk} is succeeded" in retry.stderr

    missing = manage(worker_env, "inspect", "987654")
    assert missing.returncode == EXIT_NOT_FOUND and "JOB_NOT_FOUND" in missing.stderr

    usage = manage(worker_env, "retry")  # argparse: the id is missing
    assert usage.returncode == EXIT_BAD_INPUT and "id" in usage.stderr

    drained = manage(worker_env, "drain", "--json")
    assert drained.returncode == 0, drained.stderr
    assert [r["id"] for r in json.loads(drained.stdout)] == [waiting.pk]
    assert f"ran 1/32: #{waiting.pk} test.record -> succeeded" in drained.stderr
    assert Job.objects.get(pk=waiting.pk).state == "succeeded"


@pytest.mark.process
def test_drain_keeps_the_lease_of_a_long_job(spawn, tmp_path):
    marker = tmp_path / "finish"
    long_job = slow.enqueue({"until": str(marker), "seconds": 60})
    drain = spawn("jobs", "drain", "--limit", "1", env={"JOBS_LEASE": "1s"})

    def lease() -> datetime | None:
        row = Job.objects.get(pk=long_job.pk)
        return row.leased_until if row.state == "running" else None

    first = wait_until(lease, message="the drain never claimed the job")
    assert Job.objects.get(pk=long_job.pk).worker_id.split(":")[2] == "drain"
    # A worker re-asks a running job once its lease has passed; the drain's heartbeat moves
    # the lease on while the job runs (beats every third of the 1 s lease).
    wait_until(lambda: (lease() or first) > first + timedelta(seconds=1.5), timeout=30)
    marker.touch()
    assert drain.wait() == 0, drain.output()
    assert f"ran 1/1: #{long_job.pk} test.slow -> succeeded" in drain.output()
    assert Job.objects.get(pk=long_job.pk).state == "succeeded"


@override_settings(JOBS={"CAPS": {"global": None, "queues": {}, "tenant": 1}})
def test_drain_honours_a_tenant_cap():
    # Another worker runs one of acme's jobs: with a cap of one per tenant, the drain passes
    # over acme's queued jobs and runs bolt's.
    busy = record.enqueue({"n": "busy"}, tenant="acme")
    now = timezone.now()
    Job.objects.filter(pk=busy.pk).update(
        state="running", attempts=1, worker_id="elsewhere", leased_until=now + timedelta(hours=1)
    )
    acme = record.enqueue({"n": "acme"}, tenant="acme")
    bolt = record.enqueue({"n": "bolt"}, tenant="bolt")

    ran = jobs_json("drain")
    assert [r["id"] for r in ran] == [bolt.pk]
    assert Job.objects.get(pk=acme.pk).state == "queued"
    assert Job.objects.get(pk=acme.pk).attempts == 0  # passed over, no attempt used


@override_settings(JOBS={"RATES": {"mail": "1/h"}})
def test_drain_honours_a_queue_rate():
    with time_machine.travel(T0, tick=False):
        mails = [record.enqueue({"n": n}, queue="mail") for n in range(3)]
        ran = jobs_json("drain")
    assert [r["id"] for r in ran] == [mails[0].pk]
    assert set(
        Job.objects.filter(pk__in=[m.pk for m in mails[1:]]).values_list("state", flat=True)
    ) == {"queued"}
