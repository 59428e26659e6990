"""``manage.py jobs workers``, ``queues``, ``pause`` and ``resume``: tables, ``--json`` and exit
statuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command

from django_jobs.engine import fleet
from django_jobs.models import PausedQueue
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
