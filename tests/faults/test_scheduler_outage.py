"""The scheduler across database outages: every occurrence fires once, none is missed.

Three real ``runjobs`` processes run their scheduler on a clock the test moves (the
``DJANGO_JOBS_TEST_CLOCK`` file, ``django_jobs/clock.py``), so cron's minutes pass when the test
says, not when the wall clock does. Between minutes every server connection of the workers is
ended with ``pg_terminate_backend``; in the longer outages the test database also refuses new
connections (``ALLOW_CONNECTIONS false``, on the test's own database only) while the clock
crosses one or two minute boundaries, so the missed occurrences must fire once it is back.

The leader is whoever takes the transaction-level advisory lock of a tick: the log of each
worker says what it fired, so the test tells which worker led each minute. PostgreSQL only:
on SQLite there is no server whose connections can be ended, and the tick's exclusive write
transaction (not an advisory lock) is what elects the leader there.
"""

from __future__ import annotations

import re
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection

from django_jobs import clock
from django_jobs.models import Job, Schedule
from tests.conftest import end_other_sessions, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.process, pytest.mark.postgres, pytest.mark.engine]

NAME = "beat"
# Half past a minute: each step moves the clock by whole minutes, so every tick sees exactly
# the occurrences of the minutes it crossed, and an occurrence is never on a step's edge.
START = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
FIRED = re.compile(r"Scheduler fired \d+ occurrence\(s\): (.*)")

# One round of the pattern: ("tick", n) moves the clock n minutes with the database up;
# ("kill", n) ends every worker connection, then moves it; ("outage", n) keeps the database
# refusing connections while the clock moves n minutes (1: a minute lost in the outage; 2: two,
# the older one beyond SCHEDULE_GRACE, fired by catch_up="run-all").
ROUND = [("tick", 1), ("kill", 1), ("outage", 1), ("outage", 2), ("kill", 1)]


def _key(occurrence: datetime) -> str:
    return f"schedule:{NAME}:{occurrence.isoformat()}"


def _keys_fired() -> list[str]:
    return list(
        Job.objects.filter(idempotency_key__startswith=f"schedule:{NAME}:").values_list(
            "idempotency_key", flat=True
        )
    )


def _other_sessions() -> int:
    """Server connections to the test database besides this process's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def _allow_connections(allow: bool) -> None:
    """Open or close the test database to new connections (existing ones are kept).

    Said from the server's maintenance database: PostgreSQL refuses it for the current one.
    """
    import psycopg
    from psycopg import sql

    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                sql.Identifier(settings["NAME"]),
                sql.SQL("true" if allow else "false"),
            )
        )


def _leaders(workers) -> dict[str, list[int]]:
    """Which worker's log says it fired each key."""
    by_key: dict[str, list[int]] = {}
    for index, proc in enumerate(workers):
        for line in FIRED.findall(proc.output()):
            for key in line.split(", "):
                by_key.setdefault(key.strip(), []).append(index)
    return by_key


@pytest.mark.parametrize(
    "rounds",
    [pytest.param(1, id="1-round"), pytest.param(6, id="6-rounds", marks=pytest.mark.soak)],
)
def test_the_schedule_fires_each_minute_once_across_outages(spawn, tmp_path: Path, rounds: int):
    if connection.vendor != "postgresql":
        pytest.skip(
            "PostgreSQL only: the outage ends server connections and closes the database to "
            "new ones, and SQLite has no server; its scheduler's leader is the tick's exclusive "
            "write transaction, not an advisory lock"
        )
    clock_file = tmp_path / "clock"
    now = START
    clock.set_file(clock_file, now)
    Schedule.objects.create(
        name=NAME,
        cron="* * * * *",
        tz="UTC",
        kind="test.noop",
        payload={},
        catch_up="run-all",
        synced_at=now,
        checked_until=now,
    )
    env = {
        clock.TEST_CLOCK_ENV: str(clock_file),
        "JOBS_LOG_LEVEL": "INFO",
        "DJANGO_DEBUG": "1",
        "JOBS_LEASE": "5s",
    }
    workers = [spawn("runjobs", "--concurrency", "1", env=env) for _ in range(3)]
    for proc in workers:
        proc.wait_for_output("ready")
        assert f"the clock is read from {clock_file}" in proc.output()

    def outputs() -> str:
        return "\n".join(f"--- worker {i}\n{p.output()}" for i, p in enumerate(workers))

    def unavailable(proc) -> int:
        return proc.output().count("Database unavailable")

    expected: list[str] = []
    outages = kills = 0
    try:
        for step, minutes in ROUND * rounds:
            # The jobs fired so far have run: their keys are free again, so a second firing of
            # an occurrence would be admitted, and seen below.
            wait_until(
                lambda: (
                    not Job.objects.filter(idempotency_key__startswith=f"schedule:{NAME}:").exclude(
                        state="succeeded"
                    )
                ),
                timeout=60,
                message=outputs(),
            )
            if step != "tick":
                # A worker back from an outage reconnects on its next claim or tick: wait until
                # every worker holds a connection again, so that the cut below reaches them all.
                wait_until(lambda: _other_sessions() >= len(workers), timeout=60, message=outputs())
            if step == "tick":
                now += timedelta(minutes=minutes)
                clock.set_file(clock_file, now)
            elif step == "kill":
                assert end_other_sessions() >= len(workers)
                kills += 1
                now += timedelta(minutes=minutes)
                clock.set_file(clock_file, now)
            else:
                seen = [unavailable(proc) for proc in workers]
                _allow_connections(False)
                try:
                    assert end_other_sessions() >= len(workers)
                    for _ in range(minutes):
                        now += timedelta(minutes=1)
                        clock.set_file(clock_file, now)
                    # Every worker has tried the database and been refused, with the clock
                    # already past the minute(s): the tick that owes them cannot have run.
                    wait_until(
                        lambda seen=seen: all(
                            unavailable(proc) > before
                            for proc, before in zip(workers, seen, strict=True)
                        ),
                        timeout=30,
                        message=outputs(),
                    )
                    assert not set(_keys_fired()) - set(expected), "fired during the outage"
                finally:
                    _allow_connections(True)
                outages += 1
            for back in range(minutes - 1, -1, -1):
                expected.append(_key((now - timedelta(minutes=back)).replace(second=0)))
            wait_until(
                lambda: set(expected) <= set(_keys_fired()),
                timeout=60,
                message=f"missing {sorted(set(expected) - set(_keys_fired()))}\n{outputs()}",
            )
        wait_until(
            lambda: (
                set(
                    Job.objects.filter(idempotency_key__in=expected).values_list("state", flat=True)
                )
                == {"succeeded"}
            ),
            timeout=60,
            message=outputs(),
        )
    finally:
        _allow_connections(True)

    fired = _keys_fired()
    assert sorted(fired) == sorted(expected), "an occurrence was missed or fired twice"
    for job in Job.objects.filter(idempotency_key__in=expected):
        assert job.idempotency_key == _key(job.run_at), "a job's run_at is not its occurrence"
    row = Schedule.objects.get(name=NAME)
    assert row.checked_until == now
    assert row.last_fired_at == now.replace(second=0)
    leaders = _leaders(workers)
    assert {key: len(who) for key, who in leaders.items()} == dict.fromkeys(expected, 1), (
        "each occurrence is in exactly one worker's log"
    )
    for proc in workers:
        assert proc.popen.poll() is None, f"a worker exited:\n{proc.output()}"
        assert "Database unavailable" in proc.output()
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=30) == 0, proc.output()
    sequence = [leaders[key][0] for key in expected]
    print(
        f"\nscheduler outages: occurrences={len(expected)} kills={kills} outages={outages} "
        f"leaders={sequence} workers_that_led={len(set(sequence))}"
    )
