"""Cron schedules: wall-clock firing across DST, catch-up, and one leader."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection, connections
from django.test import TestCase, TransactionTestCase, override_settings

from django_jobs import InvalidSchedule, schedule
from django_jobs.engine.schedules import undeclare
from django_jobs.engine.schedules.scheduler import tick
from django_jobs.models import Job, Schedule
from django_jobs.testing import fire_schedules, run_until_idle
from testproject.jobs import noop


def occurrence_keys(name: str) -> list[str]:
    return sorted(
        Job.objects.filter(idempotency_key__startswith=f"schedule:{name}:").values_list(
            "idempotency_key", flat=True
        )
    )


class Declared:
    """Mixin: declared schedules are removed after each test."""

    def declare(self, name, **options):
        self.addCleanup(undeclare, name)
        options.setdefault("job", noop)
        return schedule(name, **options)


class WallClockTests(Declared, TestCase):
    def run_days(self, name, start, days):
        """Tick every 10 minutes of ``days`` days from ``start``; return the fired instants."""
        with (
            override_settings(JOBS={"SCHEDULE_GRACE": "15m"}),
            time_machine.travel(start, tick=False) as clock,
        ):
            fire_schedules()  # first sync: nothing before it fires
            for _ in range(days * 24 * 6):
                clock.shift(timedelta(minutes=10))
                fire_schedules()
        return [k.split(":", 2)[2] for k in occurrence_keys(name)]

    def test_paris_3am_is_2utc_in_winter_and_1utc_in_summer(self):
        self.declare("paris", cron="0 3 * * *", tz="Europe/Paris")
        with time_machine.travel(datetime(2026, 1, 14, 23, 0, tzinfo=UTC), tick=False) as clock:
            fire_schedules()
            clock.move_to(datetime(2026, 1, 15, 1, 59, tzinfo=UTC))
            assert fire_schedules() == []
            clock.move_to(datetime(2026, 1, 15, 2, 0, tzinfo=UTC))
            [winter] = fire_schedules()
            clock.move_to(datetime(2026, 7, 15, 0, 59, 30, tzinfo=UTC))
            fire_schedules()  # the months between are missed: skipped by default
            clock.move_to(datetime(2026, 7, 15, 1, 0, 10, tzinfo=UTC))
            [summer] = fire_schedules()
        assert winter.idempotency_key == "schedule:paris:2026-01-15T02:00:00+00:00"
        assert winter.run_at == datetime(2026, 1, 15, 2, 0, tzinfo=UTC)
        assert summer.idempotency_key == "schedule:paris:2026-07-15T01:00:00+00:00"

    def test_new_york_spring_forward_fires_once_at_the_shifted_time(self):
        self.declare("ny-spring", cron="30 2 * * *", tz="America/New_York")
        fired = self.run_days("ny-spring", datetime(2026, 3, 7, 12, 0, tzinfo=UTC), 2)
        # 2026-03-08 02:30 does not exist in New York: it runs once, at 03:30 EDT.
        assert fired == ["2026-03-08T07:30:00+00:00", "2026-03-09T06:30:00+00:00"]

    def test_new_york_fall_back_fires_once_at_the_first_pass(self):
        self.declare("ny-fall", cron="30 1 * * *", tz="America/New_York")
        fired = self.run_days("ny-fall", datetime(2026, 10, 31, 12, 0, tzinfo=UTC), 2)
        assert fired == ["2026-11-01T05:30:00+00:00", "2026-11-02T06:30:00+00:00"]

    def test_bad_zone_and_bad_cron_fail_at_declaration(self):
        with pytest.raises(InvalidSchedule) as info:
            self.declare("bad-tz", cron="0 3 * * *", tz="Bogota")
        assert info.value.code == "INVALID_SCHEDULE" and "America/Bogota" in str(info.value)
        with pytest.raises(InvalidSchedule):
            self.declare("bad-cron", cron="61 * * * *", tz="UTC")
        with pytest.raises(InvalidSchedule, match="tz"):
            self.declare("no-tz", cron="0 3 * * *")
        assert Schedule.objects.count() == 0

    def test_next_runs_and_sync(self):
        handle = self.declare("hourly", cron="0 * * * *", tz="UTC", payload={"a": 1})
        after = datetime(2026, 1, 1, 10, 30, tzinfo=UTC)
        assert handle.next_runs(3, after=after) == [
            datetime(2026, 1, 1, h, 0, tzinfo=UTC) for h in (11, 12, 13)
        ]
        with time_machine.travel(after, tick=False):
            fire_schedules()
        row = Schedule.objects.get(name="hourly")
        assert row.declared and row.enabled and row.payload == {"a": 1}
        assert row.next_run_at == datetime(2026, 1, 1, 11, 0, tzinfo=UTC)
        undeclare("hourly")
        with time_machine.travel(after + timedelta(minutes=1), tick=False):
            fire_schedules()
        row.refresh_from_db()
        assert row.enabled is False  # removed from code: disabled, kept


class CatchUpTests(Declared, TestCase):
    def test_five_hours_down(self):
        start = datetime(2026, 2, 1, 0, 30, tzinfo=UTC)
        for mode in ("skip", "run-once", "run-all"):
            self.declare(f"hourly-{mode}", cron="0 * * * *", tz="UTC", catch_up=mode)
        with time_machine.travel(start, tick=False) as clock:
            fire_schedules()
            clock.shift(timedelta(hours=5))  # 01:00 .. 05:00 missed while down
            fire_schedules()
        assert occurrence_keys("hourly-skip") == []
        assert occurrence_keys("hourly-run-once") == [
            "schedule:hourly-run-once:2026-02-01T05:00:00+00:00"
        ]
        assert len(occurrence_keys("hourly-run-all")) == 5

    def test_a_paused_schedule_fires_nothing(self):
        self.declare("paused", cron="* * * * *", tz="UTC")
        with time_machine.travel(datetime(2026, 2, 1, tzinfo=UTC), tick=False) as clock:
            fire_schedules()
            Schedule.objects.filter(name="paused").update(enabled=False)
            clock.shift(timedelta(minutes=1))
            assert tick(datetime(2026, 2, 1, 0, 1, tzinfo=UTC), sync=False) == []


class TwoSchedulersTests(Declared, TransactionTestCase):
    def test_two_schedulers_never_double_fire(self):
        if (
            connection.vendor == "sqlite" and connection.settings_dict["NAME"] in (":memory:", "")
        ) or "mode=memory" in str(connection.settings_dict["NAME"]):
            pytest.skip("two connections need a file or server database")
        self.declare("every-minute", cron="* * * * *", tz="UTC")
        start = datetime(2026, 4, 1, 12, 0, 5, tzinfo=UTC)
        tick(start)  # first sync
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def scheduler(minute: int) -> None:
            try:
                barrier.wait()
                tick(start + timedelta(minutes=minute))
            except BaseException as exc:
                errors.append(exc)
            finally:
                connections.close_all()

        for minute in range(1, 101):
            threads = [threading.Thread(target=scheduler, args=(minute,)) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            # Run the fired job (its key is free again), then a restarted scheduler ticks the
            # same minute once more: the watermark, not only the key, prevents a second fire.
            run_until_idle()
            tick(start + timedelta(minutes=minute))
        assert errors == []
        keys = occurrence_keys("every-minute")
        assert len(keys) == 100 and len(set(keys)) == 100
        assert Job.objects.filter(state="succeeded").count() == 100
