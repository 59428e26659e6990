"""Schedules finer than a minute: ``every=`` intervals and a sixth cron field for seconds, and the
enqueue options (queue, priority, expires) a schedule applies to each fired job.

The clock is moved (time_machine), never slept. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import TestCase, override_settings

from django_jobs import InvalidSchedule, schedule
from django_jobs.engine import schedules
from django_jobs.engine.schedules import undeclare
from django_jobs.engine.schedules.scheduler import tick_until
from django_jobs.models import Job, Schedule
from django_jobs.testing import fire_schedules, run_until_idle
from testproject.jobs import noop

T0 = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)


def keys(name: str) -> list[str]:
    return sorted(
        Job.objects.filter(idempotency_key__startswith=f"schedule:{name}:").values_list(
            "idempotency_key", flat=True
        )
    )


class Declared:
    def declare(self, name, **options):
        self.addCleanup(undeclare, name)
        options.setdefault("job", noop)
        return schedule(name, **options)


class EveryTests(Declared, TestCase):
    def test_every_20s_fires_at_multiples_of_20s_from_the_epoch(self):
        handle = self.declare("every20", every="20s")
        assert handle.every == timedelta(seconds=20) and handle.tz == "UTC"
        assert handle.next_runs(3, after=T0) == [
            datetime(2026, 3, 1, 12, 0, s, tzinfo=UTC) for s in (20, 40)
        ] + [datetime(2026, 3, 1, 12, 1, 0, tzinfo=UTC)]
        with time_machine.travel(T0, tick=False) as clock:
            fire_schedules()  # first sync: nothing before it fires
            row = Schedule.objects.get(name="every20")
            assert (row.cron, row.every) == ("", timedelta(seconds=20))
            assert row.next_run_at == datetime(2026, 3, 1, 12, 0, 20, tzinfo=UTC)
            clock.shift(timedelta(seconds=14))  # 12:00:19
            assert fire_schedules() == []
            clock.shift(timedelta(seconds=1))  # 12:00:20
            [first] = fire_schedules()
            for _ in range(6):  # a tick each 10 s up to 12:01:20
                clock.shift(timedelta(seconds=10))
                fire_schedules()
        assert first.idempotency_key == "schedule:every20:2026-03-01T12:00:20+00:00"
        assert first.run_at == datetime(2026, 3, 1, 12, 0, 20, tzinfo=UTC)
        assert keys("every20") == [
            f"schedule:every20:2026-03-01T12:{m}+00:00"
            for m in ("00:20", "00:40", "01:00", "01:20")
        ]

    def test_the_tick_says_when_the_next_occurrence_is(self):
        self.declare("every20-next", every="20s")
        self.declare("hourly", cron="0 * * * *", tz="UTC")
        with time_machine.travel(T0, tick=False):
            fired, next_at = tick_until(T0)
        assert fired == [] and next_at == datetime(2026, 3, 1, 12, 0, 20, tzinfo=UTC)

    def test_catch_up_applies_unchanged(self):
        with override_settings(JOBS={"SCHEDULE_GRACE": "5s"}):
            for mode in ("skip", "run-once", "run-all"):
                self.declare(f"e-{mode}", every="20s", catch_up=mode)
            with time_machine.travel(T0, tick=False) as clock:
                fire_schedules()
                clock.shift(timedelta(seconds=116))  # 12:02:01: 12:00:20 .. 12:02:00 passed
                fire_schedules()
        assert keys("e-skip") == ["schedule:e-skip:2026-03-01T12:02:00+00:00"]
        assert keys("e-run-once") == [
            "schedule:e-run-once:2026-03-01T12:01:40+00:00",
            "schedule:e-run-once:2026-03-01T12:02:00+00:00",
        ]
        assert len(keys("e-run-all")) == 6

    def test_exactly_one_of_cron_and_every_and_a_clear_error(self):
        with pytest.raises(InvalidSchedule, match="not both"):
            self.declare("both", cron="* * * * *", every="20s", tz="UTC")
        with pytest.raises(InvalidSchedule, match="exactly one"):
            self.declare("neither", tz="UTC")
        with pytest.raises(InvalidSchedule, match="shorter than 1 second"):
            self.declare("fast", every="500ms")
        with pytest.raises(InvalidSchedule, match="not a duration"):
            self.declare("words", every="often")
        with pytest.raises(InvalidSchedule, match="Bogota"):
            self.declare("zone", every="1m", tz="Bogota")
        assert Schedule.objects.count() == 0

    def test_switching_a_row_from_cron_to_every_needs_clearing_cron(self):
        with time_machine.travel(T0, tick=False):
            row = schedules.create(name="switch", cron="0 * * * *", tz="UTC", kind="test.noop")
            with pytest.raises(InvalidSchedule, match="not both") as info:
                schedules.update(row, {"every": "30s"})
            assert info.value.field == "every"
            row.refresh_from_db()
            assert (row.cron, row.every) == ("0 * * * *", None)
            schedules.update(row, {"cron": None, "every": "30s"})
            row.refresh_from_db()
        assert (row.cron, row.every) == ("", timedelta(seconds=30))
        assert row.next_run_at == datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
        assert str(row) == "switch (every 30s UTC)"


class SixFieldCronTests(Declared, TestCase):
    def test_the_sixth_field_is_the_second(self):
        every20 = self.declare("c20", cron="* * * * * */20", tz="UTC")
        at = self.declare("c3", cron="0 3 * * * 30", tz="Europe/Paris")
        assert every20.cron == "* * * * * */20"
        assert every20.next_runs(3, after=T0) == [
            datetime(2026, 3, 1, 12, 0, s, tzinfo=UTC) for s in (20, 40)
        ] + [datetime(2026, 3, 1, 12, 1, 0, tzinfo=UTC)]
        # 03:00:30 Paris time is 02:00:30 UTC in winter.
        assert at.next_runs(1, after=T0) == [datetime(2026, 3, 2, 2, 0, 30, tzinfo=UTC)]
        with time_machine.travel(T0, tick=False) as clock:
            fire_schedules()
            clock.shift(timedelta(seconds=15))  # 12:00:20
            [job] = fire_schedules()
        assert job.idempotency_key == "schedule:c20:2026-03-01T12:00:20+00:00"

    def test_dst_moves_the_seconds_with_their_minute(self):
        # 02:30:30 does not exist in New York on 2026-03-08: it runs once, at 03:30:30 EDT;
        # on the fall-back day 01:30:30 runs once, at its first pass.
        spring = self.declare("ny-s", cron="30 2 * * * 30", tz="America/New_York")
        fall = self.declare("ny-f", cron="30 1 * * * 30", tz="America/New_York")
        assert spring.next_runs(3, after=datetime(2026, 3, 7, 0, 0, tzinfo=UTC)) == [
            datetime(2026, 3, 7, 7, 30, 30, tzinfo=UTC),
            datetime(2026, 3, 8, 7, 30, 30, tzinfo=UTC),
            datetime(2026, 3, 9, 6, 30, 30, tzinfo=UTC),
        ]
        assert fall.next_runs(2, after=datetime(2026, 11, 1, 0, 0, tzinfo=UTC)) == [
            datetime(2026, 11, 1, 5, 30, 30, tzinfo=UTC),
            datetime(2026, 11, 2, 6, 30, 30, tzinfo=UTC),
        ]


class OptionsTests(Declared, TestCase):
    def test_queue_priority_and_expires_apply_to_each_fired_job(self):
        self.declare(
            "opts", every="20s", queue="reports", priority=-3, expires="10s", payload={"o": 1}
        )
        with time_machine.travel(T0, tick=False) as clock:
            fire_schedules()
            clock.shift(timedelta(seconds=15))  # 12:00:20
            [first] = fire_schedules()
            assert (first.queue, first.priority) == ("reports", -3)
            # Expiry counts from the occurrence, whenever the tick fires it.
            assert first.expires_at == datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
            [ran] = run_until_idle()
            assert ran.pk == first.pk and ran.state == "succeeded"
            clock.shift(timedelta(seconds=20))  # 12:00:40: the next one fires...
            [second] = fire_schedules()
            clock.shift(timedelta(seconds=11))  # ...and nobody runs it for 11 s
            assert run_until_idle() == []
        second.refresh_from_db()
        assert (second.state, second.error) == ("cancelled", "expired")
        row = Schedule.objects.get(name="opts")
        assert (row.queue, row.priority, row.expires) == ("reports", -3, timedelta(seconds=10))


class WorkerTickTests(TestCase):
    def test_the_leader_wakes_at_its_schedules_next_occurrence(self):
        from django_jobs.engine.worker.worker import MIN_TICK, TICK_EVERY, Worker

        with time_machine.travel(T0, tick=False) as clock:
            schedules.create(name="w20", every="20s", kind="test.noop")
            worker = Worker(concurrency=1)
            assert worker._tick_schedules() == TICK_EVERY  # 15 s away: a tick a second
            clock.move_to(datetime(2026, 3, 1, 12, 0, 19, 700000, tzinfo=UTC))
            assert worker._tick_schedules() == pytest.approx(0.3)  # at 12:00:20 sharp
            clock.move_to(datetime(2026, 3, 1, 12, 0, 19, 990000, tzinfo=UTC))
            assert worker._tick_schedules() == MIN_TICK  # never a busy loop
            clock.move_to(datetime(2026, 3, 1, 12, 0, 20, tzinfo=UTC))
            assert worker._tick_schedules() == TICK_EVERY
        assert keys("w20") == ["schedule:w20:2026-03-01T12:00:20+00:00"]
