"""``manage.py jobs workers``, ``queues``, ``pause`` and ``resume``: tables, ``--json`` and exit
statuses."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command

from django_jobs.engine.rows import fleet
from django_jobs.models import PausedQueue, worker_pid
from testproject.jobs import noop

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def test_workers_table_and_json():
    assert "No workers have a row" in run("workers")
    with time_machine.travel(T0, tick=False) as clock:
        fleet.register("web:1", queues=["mail", "sms"], concurrency=4, pid=4242, hostname="h1")
        clock.shift(timedelta(seconds=12))
        table = run("workers")
        [row] = json.loads(run("workers", "--json"))
    assert "web:1" in table and "mail,sms" in table and "1 x 4" in table
    assert "12.0s ago" in table and "running" in table
    assert (row["name"], row["pid"], row["heartbeat_age_s"]) == ("web:1", 4242, 12.0)
    assert row["processes_detail"] == [] and "Processes:" not in table


def test_workers_table_lists_each_process_under_a_table_of_its_own():
    process = fleet.process_entry(
        slot=1,
        pid=5151,
        generation=2,
        started_at=T0,
        rss_bytes=84 * 2**20,
        jobs_done=17,
        restarts=3,
        jobs=[42, 41],
    )
    fleet.register("web:2", processes=2, pid=5150, processes_detail=[process])
    table = run("workers")
    [row] = json.loads(run("workers", "--json"))
    assert row["processes_detail"] == [{**process, "jobs": [41, 42]}]
    head, _, processes = table.partition("\n\nProcesses:\n")
    assert "web:2" in head and "2 x 1" in head
    header, line = processes.splitlines()
    assert header.split() == [
        "WORKER", "SLOT", "PID", "GEN", "STARTED", "RSS", "DONE", "RESTARTS", "RUNNING"
    ]  # fmt: skip
    assert line.split() == ["web:2", "1", "5151", "2", *T0.strftime("%Y-%m-%d %H:%M:%S").split(),
                            "84", "MiB", "17", "3", "41,42"]  # fmt: skip


def test_pause_resume_and_the_queues_list():
    noop.enqueue({"n": 1}, queue="mail")
    assert "is paused" in run("pause", "mail", "--reason", "SMTP down")
    [mail] = [q for q in json.loads(run("queues", "--json")) if q["queue"] == "mail"]
    assert (mail["paused"], mail["reason"], mail["states"]) == (True, "SMTP down", {"queued": 1})
    assert "SMTP down" in run("queues")
    assert json.loads(run("resume", "mail", "--json"))["resumed"] is True
    assert "was not paused" in run("resume", "mail")
    assert not PausedQueue.objects.exists()


def test_pause_of_an_unknown_engine_says_which_exist():
    with pytest.raises(CommandError, match=r"UNKNOWN_ENGINE.*default") as raised:
        run("pause", "mail", "--engine", "nope")
    assert raised.value.returncode == 3
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("jobs", "pause", "", "--json", stdout=out)
    assert json.loads(out.getvalue())["error"]["code"] == "INVALID_PAYLOAD"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("w" * 300, "--name is 300 characters; a worker's name holds at most 175"),
        ("web\x1b[31m-1", "U+001B"),
        ("tab\there", "U+0009"),
    ],
)
def test_runjobs_refuses_a_name_that_no_row_can_hold_before_it_starts(name, said):
    with pytest.raises(CommandError) as refused:
        call_command("runjobs", "--name", name, "--burst", "--processes", "0")
    message = str(refused.value)
    assert said in message and "--name" in message
    assert "\x1b" not in message and "\t" not in message  # never printed raw


def test_the_longest_name_runjobs_accepts_fits_its_row_and_its_jobs():
    # The limit is the columns' own: a worker of the longest name writes its row and claims.
    from django_jobs.engine.worker.worker import make_worker_id
    from tests.conftest import claim

    assert fleet.name_limit("default") == 175 and fleet.name_limit("fleet") == 177
    longest = "n" * fleet.name_limit("default")
    assert fleet.name_problem(longest) is None
    assert fleet.name_problem(longest + "n") is not None
    fleet.register(longest)
    job = noop.enqueue({"n": "longest"})
    [claimed] = claim(make_worker_id("default", longest))
    assert claimed.pk == job.pk
    job.refresh_from_db()
    assert job.worker_id.startswith(longest + ":default:")
    # The longest pid (7 digits) fills the column: 200 characters.
    assert len(job.worker_id) == 200 - (7 - len(str(os.getpid())))
    assert worker_pid(job.worker_id) == os.getpid()


@pytest.mark.process
def test_runjobs_with_a_name_too_long_exits_at_once_saying_what_to_pass(spawn):
    worker = spawn("runjobs", "--name", "w" * 300)
    assert worker.wait(timeout=60) != 0
    output = worker.output()
    assert "at most 175" in output and "Pass a shorter --name" in output
    assert "retrying" not in output
