"""Cron schedules in time zones (django_jobs.engine.schedules.cron): pure, no database."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.engine.schedules.cron import (
    CATCH_UP_CHOICES,
    MAX_CATCH_UP,
    due_occurrences,
    next_runs,
    occurrences_between,
    validate_cron,
    validate_tz,
)
from django_jobs.exceptions import InvalidSchedule


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def assert_utc(instants: list[datetime]) -> None:
    for instant in instants:
        assert instant.tzinfo is UTC


# --- zones and DST -------------------------------------------------------------------------


def test_paris_daily_follows_winter_and_summer_offsets() -> None:
    winter = next_runs("0 3 * * *", "Europe/Paris", utc(2026, 1, 15), n=1)
    summer = next_runs("0 3 * * *", "Europe/Paris", utc(2026, 7, 15), n=1)
    assert winter == [utc(2026, 1, 15, 2, 0)]
    assert summer == [utc(2026, 7, 15, 1, 0)]
    assert_utc(winter + summer)


def test_spring_forward_nonexistent_time_runs_once_shifted() -> None:
    runs = next_runs("30 2 * * *", "America/New_York", utc(2026, 3, 6), n=4)
    assert runs == [
        utc(2026, 3, 6, 7, 30),  # 02:30 EST
        utc(2026, 3, 7, 7, 30),  # 02:30 EST
        utc(2026, 3, 8, 7, 30),  # 02:30 does not exist: 03:30 EDT
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
    ]
    shifted = runs[2].astimezone(ZoneInfo("America/New_York"))
    assert (shifted.hour, shifted.minute) == (3, 30)
    on_the_day = occurrences_between(
        "30 2 * * *", "America/New_York", utc(2026, 3, 8, 5), utc(2026, 3, 9, 4, 59)
    )
    assert on_the_day == [utc(2026, 3, 8, 7, 30)]
    assert_utc(runs)


def test_fall_back_ambiguous_time_runs_once_at_first_pass() -> None:
    on_the_day = occurrences_between(
        "30 1 * * *", "America/New_York", utc(2026, 11, 1, 4), utc(2026, 11, 2, 4, 59)
    )
    assert on_the_day == [utc(2026, 11, 1, 5, 30)]  # 01:30 EDT, the first 01:30
    assert next_runs("30 1 * * *", "America/New_York", utc(2026, 10, 31), n=3) == [
        utc(2026, 10, 31, 5, 30),
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 2, 6, 30),
    ]
    # Asked from inside the second 01:xx pass, the day's run is already behind.
    assert next_runs("30 1 * * *", "America/New_York", utc(2026, 11, 1, 6, 10), n=1) == [
        utc(2026, 11, 2, 6, 30)
    ]


def test_every_minute_across_spring_forward_has_no_duplicates() -> None:
    runs = occurrences_between(
        "* * * * *", "America/New_York", utc(2026, 3, 8, 5, 59), utc(2026, 3, 8, 8, 59)
    )
    assert runs == [utc(2026, 3, 8, 6) + timedelta(minutes=i) for i in range(180)]


def test_every_minute_across_fall_back_skips_the_repeated_hour() -> None:
    runs = occurrences_between(
        "* * * * *", "America/New_York", utc(2026, 11, 1, 4, 59), utc(2026, 11, 1, 7, 0)
    )
    first_pass = [utc(2026, 11, 1, 5) + timedelta(minutes=i) for i in range(60)]
    assert runs == [*first_pass, utc(2026, 11, 1, 7, 0)]  # 06:xx UTC is 01:xx again: fired


def test_half_hour_gap_orders_shifted_and_real_times() -> None:
    # Lord Howe jumps 02:00 -> 02:30 on 2026-10-04: 02:20 does not exist (runs at 02:50),
    # 02:40 does. The shifted run comes after the real one.
    zone = ZoneInfo("Australia/Lord_Howe")
    runs = occurrences_between(
        "20,40 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 3, 12), utc(2026, 10, 4, 12)
    )
    local = [run.astimezone(zone) for run in runs]
    assert [(t.day, t.hour, t.minute) for t in local] == [(4, 2, 40), (4, 2, 50)]
    assert runs == sorted(set(runs))


def test_after_just_past_a_transition_still_sees_the_shifted_run() -> None:
    # 07:10 UTC is 03:10 EDT on the spring-forward day; the 02:30 run happens at 03:30 EDT.
    assert next_runs("30 2 * * *", "America/New_York", utc(2026, 3, 8, 7, 10), n=1) == [
        utc(2026, 3, 8, 7, 30)
    ]


def test_next_runs_is_strictly_after_and_accepts_any_aware_after() -> None:
    paris = ZoneInfo("Europe/Paris")
    assert next_runs("0 3 * * *", "Europe/Paris", utc(2026, 1, 15, 2), n=1) == [utc(2026, 1, 16, 2)]
    runs = next_runs("0 3 * * *", "Europe/Paris", datetime(2026, 1, 15, 3, 0, 1, tzinfo=paris))
    assert runs[0] == utc(2026, 1, 16, 2)
    assert len(runs) == 5
    assert_utc(runs)
    assert next_runs("0 3 * * *", "Europe/Paris", utc(2026, 1, 15), n=0) == []


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_runs("0 3 * * *", "UTC", datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        occurrences_between("0 3 * * *", "UTC", utc(2026, 1, 1), datetime(2026, 2, 1))


def test_occurrences_between_keeps_the_earliest_up_to_limit() -> None:
    runs = occurrences_between("0 * * * *", "UTC", utc(2026, 1, 1), utc(2026, 1, 2), limit=3)
    assert runs == [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]
    assert occurrences_between("0 * * * *", "UTC", utc(2026, 1, 2), utc(2026, 1, 1)) == []
    full_day = occurrences_between("0 * * * *", "UTC", utc(2026, 1, 1), utc(2026, 1, 2))
    assert len(full_day) == 24  # (after, until]: 01:00 .. next 00:00
    assert full_day[-1] == utc(2026, 1, 2)


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "tz"),
    [
        ("0 3 * * *", "Bogota"),
        ("0 3 * * *", None),
        ("0 3 * * *", ""),
        ("61 * * * *", "UTC"),
        ("* * *", "UTC"),
        ("0 0 * * * * 2030", "UTC"),  # a seventh field (years) is refused
        ("0 0 * * * 60", "UTC"),  # the second is 0-59
        ("0 0 * * * H", "UTC"),
    ],
)
def test_bad_schedules_raise_invalid_schedule(cron: str, tz: str | None) -> None:
    with pytest.raises(InvalidSchedule) as info:
        next_runs(cron, tz, utc(2026, 1, 1))  # type: ignore[arg-type]
    assert info.value.code == "INVALID_SCHEDULE"
    assert isinstance(info.value, ValueError)


def test_bad_zone_message_names_it_and_suggests_a_valid_one() -> None:
    with pytest.raises(InvalidSchedule) as info:
        validate_tz("Bogota")
    assert "'Bogota'" in info.value.message
    assert "America/Bogota" in info.value.message
    for typo, fix in [("europe/paris", "Europe/Paris"), ("New York", "America/New_York")]:
        with pytest.raises(InvalidSchedule, match=fix):
            validate_tz(typo)
    with pytest.raises(InvalidSchedule, match=r"needs tz"):
        validate_tz(None)


@pytest.mark.parametrize("tz", ["localtime", "posix/Europe/Paris", "right/UTC", "Nowhere/Xyz"])
def test_non_iana_zone_names_are_refused(tz: str) -> None:
    with pytest.raises(InvalidSchedule):
        validate_tz(tz)


def test_validate_tz_returns_zoneinfo() -> None:
    assert validate_tz("Europe/Paris") == ZoneInfo("Europe/Paris")
    assert validate_tz("UTC") == ZoneInfo("UTC")


@pytest.mark.parametrize(
    "cron",
    [
        "",
        "   ",
        "61 * * * *",
        "* * *",
        "0 0 * * * * *",
        "0 0 1 1 * 2030",
        "0 24 * * *",
        "*/0 * * * *",
        "0 0 30 2 *",
        "H * * * *",
        "R 3 * * *",
        "@reboot",
        None,
        5,
    ],
)
def test_validate_cron_refuses(cron: object) -> None:
    with pytest.raises(InvalidSchedule) as info:
        validate_cron(cron)  # type: ignore[arg-type]
    assert info.value.code == "INVALID_SCHEDULE"


def test_validate_cron_normalizes() -> None:
    assert validate_cron("  0   3 * *\tMON-FRI ") == "0 3 * * MON-FRI"
    assert validate_cron("@daily") == "0 0 * * *"
    assert validate_cron("@hourly") == "0 * * * *"
    assert validate_cron("0 0 30 2 1") == "0 0 30 2 1"  # day-of-month OR Monday: fires
    assert validate_cron("0 0 L * *") == "0 0 L * *"


@settings(database=None, max_examples=150, deadline=None)
@given(st.text(max_size=30))
def test_validate_cron_only_raises_invalid_schedule(text: str) -> None:
    try:
        normalized = validate_cron(text)
    except InvalidSchedule:
        return
    assert len(normalized.split(" ")) == 5


# --- catch-up ------------------------------------------------------------------------------

T0 = utc(2026, 1, 1)


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        ("skip", []),
        ("run-once", [T0 + timedelta(hours=5)]),
        ("run-all", [T0 + timedelta(hours=h) for h in range(1, 6)]),
    ],
)
def test_catch_up_policies(catch_up: str, expected: list[datetime]) -> None:
    due = due_occurrences(
        "0 * * * *",
        "UTC",
        since=T0,
        now=T0 + timedelta(hours=5, minutes=10),
        grace=timedelta(seconds=60),
        catch_up=catch_up,
    )
    assert due == expected
    assert_utc(due)


@pytest.mark.parametrize("catch_up", CATCH_UP_CHOICES)
def test_on_time_occurrence_fires_under_every_policy(catch_up: str) -> None:
    due = due_occurrences(
        "0 * * * *",
        "UTC",
        since=T0,
        now=T0 + timedelta(hours=5, seconds=30),
        grace=timedelta(seconds=60),
        catch_up=catch_up,
    )
    on_time = T0 + timedelta(hours=5)
    assert due[-1] == on_time
    assert {"skip": 1, "run-once": 2, "run-all": 5}[catch_up] == len(due)


def test_occurrence_exactly_grace_old_is_not_missed() -> None:
    due = due_occurrences(
        "0 * * * *",
        "UTC",
        since=T0,
        now=T0 + timedelta(hours=1, seconds=60),
        grace=timedelta(seconds=60),
        catch_up="skip",
    )
    assert due == [T0 + timedelta(hours=1)]


def test_nothing_is_due_when_now_is_not_after_since() -> None:
    for now in (T0, T0 - timedelta(hours=1)):
        due = due_occurrences(
            "* * * * *", "UTC", since=T0, now=now, grace=timedelta(0), catch_up="run-all"
        )
        assert due == []


def test_unknown_catch_up_is_refused() -> None:
    with pytest.raises(InvalidSchedule, match="run-once"):
        due_occurrences("0 * * * *", "UTC", since=T0, now=T0, grace=timedelta(0), catch_up="all")


def test_run_all_is_capped_at_the_latest_thousand_without_walking_the_gap(monkeypatch) -> None:
    # 30 days of minutes are 43,200 occurrences; the work must follow the cap, not the gap:
    # counted in croniter steps (a clock would measure the machine, not the walk).
    steps = itertools.count()
    for name in ("get_next", "get_prev"):
        step = getattr(croniter, name)

        def counted(self, *args, _step=step, **kwargs):
            next(steps)
            return _step(self, *args, **kwargs)

        monkeypatch.setattr(croniter, name, counted)
    now = T0 + timedelta(days=30)
    grace = timedelta(seconds=60)
    due = due_occurrences(
        "* * * * *", "Europe/Paris", since=T0, now=now, grace=grace, catch_up="run-all"
    )
    assert next(steps) <= 4 * MAX_CATCH_UP  # about 3 steps per occurrence kept
    missed = [run for run in due if now - run > grace]
    on_time = [run for run in due if now - run <= grace]
    assert on_time == [now - timedelta(minutes=1), now]
    assert len(missed) == MAX_CATCH_UP
    assert missed[-1] == now - timedelta(minutes=2)
    assert missed[0] == now - timedelta(minutes=MAX_CATCH_UP + 1)  # the latest 1,000
    assert due == sorted(set(due))
    assert_utc(due)
    once = due_occurrences(
        "* * * * *", "Europe/Paris", since=T0, now=now, grace=grace, catch_up="run-once"
    )
    assert once == [now - timedelta(minutes=2), *on_time]


def test_run_all_cap_is_exact_right_after_spring_forward() -> None:
    # The missed range ends at 03:30 EDT, just after the 02:00 -> 03:00 jump: counting wall
    # minutes back from there over-counts (02:00-02:59 do not exist), yet the cap holds exactly.
    now = utc(2026, 3, 8, 7, 31)
    grace = timedelta(seconds=60)
    since = now - timedelta(days=2)
    every = occurrences_between("* * * * *", "America/New_York", since, now, limit=10_000)
    due = due_occurrences(
        "* * * * *", "America/New_York", since=since, now=now, grace=grace, catch_up="run-all"
    )
    missed = [run for run in every if now - run > grace]
    assert len(missed) > MAX_CATCH_UP
    assert due == [*missed[-MAX_CATCH_UP:], now - timedelta(minutes=1), now]


def test_run_once_after_a_long_gap_in_a_sparse_schedule() -> None:
    due = due_occurrences(
        "0 9 1 * *",
        "Europe/Paris",
        since=utc(2020, 1, 1),
        now=utc(2026, 6, 15),
        grace=timedelta(minutes=5),
        catch_up="run-once",
    )
    assert due == [utc(2026, 6, 1, 7)]  # 09:00 CEST


# --- properties ----------------------------------------------------------------------------

ZONES = (
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "UTC",
    "America/Sao_Paulo",
)
DST_ZONES = ("Europe/Paris", "America/New_York", "Australia/Lord_Howe")
START = utc(2024, 1, 1)
END = utc(2028, 12, 31)


@dataclass(frozen=True)
class Cron:
    """A generated expression and the sets it stands for: an oracle independent of croniter."""

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int] | None  # None: "*"
    months: frozenset[int]
    weekdays: frozenset[int] | None  # cron numbering, 0 = Sunday; None: "*"

    def matches(self, wall: datetime) -> bool:
        if wall.minute not in self.minutes or wall.hour not in self.hours:
            return False
        if wall.month not in self.months:
            return False
        day_ok = self.days is None or wall.day in self.days
        weekday_ok = self.weekdays is None or (wall.weekday() + 1) % 7 in self.weekdays
        if self.days is not None and self.weekdays is not None:
            return day_ok or weekday_ok  # cron: both restricted means either
        return day_ok and weekday_ok


def _field(low: int, high: int, *, star: bool, steps: tuple[int, ...]) -> st.SearchStrategy:
    """(text, values) for one field; values is None for "*"."""
    single = st.integers(low, high).map(lambda v: (str(v), frozenset({v})))
    pair = st.lists(st.integers(low, high), min_size=2, max_size=3, unique=True).map(
        lambda vs: (",".join(map(str, vs)), frozenset(vs))
    )
    ranged = st.tuples(st.integers(low, high - 1), st.integers(1, 3)).map(
        lambda t: (
            f"{t[0]}-{min(t[0] + t[1], high)}",
            frozenset(range(t[0], min(t[0] + t[1], high) + 1)),
        )
    )
    options = [single, pair, ranged]
    if steps:
        options.append(
            st.sampled_from(steps).map(lambda k: (f"*/{k}", frozenset(range(low, high + 1, k))))
        )
    if star:
        options.append(st.just(("*", None)))
    return st.one_of(*options)


def _often_star(draw: st.DrawFn, field: st.SearchStrategy, percent: int) -> tuple:
    return ("*", None) if draw(st.integers(0, 99)) < percent else draw(field)


@st.composite
def crons(draw: st.DrawFn) -> Cron:
    minute = draw(_field(0, 59, star=True, steps=(5, 10, 15, 20, 30)))
    # Bias the hour towards the ones DST transitions touch.
    near_transitions = st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True).map(
        lambda vs: (",".join(map(str, vs)), frozenset(vs))
    )
    any_hour = _field(0, 23, star=True, steps=(2, 3, 6))
    hour = draw(near_transitions if draw(st.integers(0, 99)) < 75 else any_hour)
    day = _often_star(draw, _field(1, 31, star=False, steps=()), 85)
    month = _often_star(draw, _field(1, 12, star=False, steps=()), 85)
    weekday = _often_star(draw, _field(0, 6, star=False, steps=()), 85)
    expr = " ".join(part[0] for part in (minute, hour, day, month, weekday))
    return Cron(
        expr=expr,
        minutes=minute[1] if minute[1] is not None else frozenset(range(60)),
        hours=hour[1] if hour[1] is not None else frozenset(range(24)),
        days=day[1],
        months=month[1] if month[1] is not None else frozenset(range(1, 13)),
        weekdays=weekday[1],
    )


@functools.cache
def _transitions(tz: str) -> tuple[datetime, ...]:
    """The UTC instants (to the minute) where ``tz`` changes offset between START and END."""
    zone = ZoneInfo(tz)
    found = []
    step = timedelta(hours=6)
    at = START
    while at < END:
        if at.astimezone(zone).utcoffset() != (at + step).astimezone(zone).utcoffset():
            low, high = at, at + step
            while high - low > timedelta(minutes=1):
                mid = low + (high - low) / 2
                if mid.astimezone(zone).utcoffset() == low.astimezone(zone).utcoffset():
                    low = mid
                else:
                    high = mid
            found.append(high.replace(second=0, microsecond=0))
        at += step
    return tuple(found)


@st.composite
def windows(draw: st.DrawFn, tz: str) -> tuple[datetime, datetime]:
    """A range ``(after, until]`` in 2024-2028, mostly one that spans a transition of ``tz``.

    A spanning range starts up to 36 hours before the transition and ends 1 to 12 hours after
    it, so it holds both a fall-back's first pass and its repeat, or a whole spring-forward gap.
    """
    transitions = _transitions(tz)
    if transitions and draw(st.integers(0, 99)) < 80:
        base = draw(st.sampled_from(transitions))
        after = base - timedelta(minutes=draw(st.integers(0, 36 * 60)))
        until = base + timedelta(minutes=draw(st.integers(60, 12 * 60)))
    else:
        naive = draw(st.datetimes(START.replace(tzinfo=None), END.replace(tzinfo=None)))
        after = naive.replace(tzinfo=UTC, microsecond=0)
        until = after + timedelta(minutes=draw(st.integers(60, 48 * 60)))
    after = after.replace(second=draw(st.sampled_from([0, 0, 1, 59])))
    return after, until


def _shifted_from_gap(cron: Cron, zone: ZoneInfo, instant: datetime) -> bool:
    """Whether ``instant`` is where a nonexistent matching wall time was shifted to."""
    offset_before = (instant - timedelta(days=1)).astimezone(zone).utcoffset()
    assert offset_before is not None
    wall = instant.replace(tzinfo=None) + offset_before
    exists = wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall
    return not exists and cron.matches(wall)


def _brute_force(cron: Cron, tz: str, after: datetime, until: datetime) -> list[datetime]:
    """Every occurrence in (after, until], found minute by minute."""
    zone = ZoneInfo(tz)
    found = set()
    minute = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while minute <= until:
        local = minute.astimezone(zone)
        if local.fold == 0 and cron.matches(local.replace(tzinfo=None)):
            found.add(minute)  # an existing wall time, at its first pass
        minute += timedelta(minutes=1)
    wall = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0) - timedelta(days=1)
    wall_end = until.astimezone(zone).replace(tzinfo=None) + timedelta(days=1)
    while wall <= wall_end:
        first = wall.replace(tzinfo=zone)
        later = wall.replace(tzinfo=zone, fold=1)
        if first.utcoffset() < later.utcoffset() and cron.matches(wall):  # type: ignore[operator]
            shifted = first.astimezone(UTC)  # nonexistent: fold=0 shifts it by the gap
            if after < shifted <= until:
                found.add(shifted)
        wall += timedelta(minutes=1)
    return sorted(found)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cron, str, datetime, datetime]:
    """A cron, a zone (DST-observing ones thrice as often) and a range ``(after, until]``."""
    tz = draw(st.sampled_from(ZONES + DST_ZONES + DST_ZONES))
    after, until = draw(windows(tz))
    return draw(crons()), tz, after, until


@settings(
    database=None, max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(cases())
def test_next_runs_properties(case: tuple[Cron, str, datetime, datetime]) -> None:
    cron, tz, after, _ = case
    zone = ZoneInfo(tz)
    runs = next_runs(cron.expr, tz, after, n=5)
    assert len(runs) == 5
    assert_utc(runs)
    assert all(run > after for run in runs)
    assert all(a < b for a, b in itertools.pairwise(runs))
    for run in runs:
        local = run.astimezone(zone)
        on_wall = local.fold == 0 and cron.matches(local.replace(tzinfo=None))
        assert on_wall or _shifted_from_gap(cron, zone, run), (cron.expr, tz, after, run)
    assert occurrences_between(cron.expr, tz, after, runs[-1], limit=100) == runs
    assert (
        occurrences_between(cron.expr, tz, after, runs[-1] + timedelta(days=3650), limit=5) == runs
    )
    assert next_runs(cron.expr, tz, runs[1], n=3) == runs[2:]


@settings(
    database=None, max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(cases())
def test_occurrences_between_matches_brute_force(
    case: tuple[Cron, str, datetime, datetime],
) -> None:
    cron, tz, after, until = case
    expected = _brute_force(cron, tz, after, until)
    assert occurrences_between(cron.expr, tz, after, until, limit=10_000) == expected


@settings(
    database=None, max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(cases(), st.integers(0, 6 * 60 * 60), st.sampled_from(CATCH_UP_CHOICES))
def test_due_occurrences_agree_with_occurrences_between(
    case: tuple[Cron, str, datetime, datetime], grace_s: int, catch_up: str
) -> None:
    cron, tz, since, now = case
    grace = timedelta(seconds=grace_s)
    every = occurrences_between(cron.expr, tz, since, now, limit=100_000)
    missed = [run for run in every if now - run > grace]
    on_time = [run for run in every if now - run <= grace]
    kept = {"skip": [], "run-once": missed[-1:], "run-all": missed[-MAX_CATCH_UP:]}[catch_up]
    due = due_occurrences(cron.expr, tz, since=since, now=now, grace=grace, catch_up=catch_up)
    assert due == kept + on_time[-MAX_CATCH_UP:]


# --- seconds: every= intervals and the sixth cron field ---------------------------------------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@settings(database=None, max_examples=300, deadline=None)
@given(
    every=st.one_of(
        st.integers(1, 3 * 86400).map(lambda s: timedelta(seconds=s)),
        st.integers(1_000_000, 10**11).map(lambda us: timedelta(microseconds=us)),
    ),
    after=st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
    n=st.integers(1, 20),
)
def test_every_occurrences_are_multiples_from_the_epoch_strictly_increasing(every, after, n):
    runs = next_runs(None, None, after, n, every=every)
    assert len(runs) == n
    assert_utc(runs)
    assert runs[0] > after and runs[0] - every <= after  # the first multiple after ``after``
    for run in runs:
        assert (run - EPOCH) % every == timedelta(0)
    assert all(b - a == every for a, b in itertools.pairwise(runs))
    # The scheduler's view agrees: a tick at the last one, since ``after``, fires them all.
    due = due_occurrences(
        None,
        None,
        since=after,
        now=runs[-1],
        grace=timedelta(days=400),
        catch_up="skip",
        every=every,
    )
    assert due == runs
    assert occurrences_between(None, None, after, runs[-1], every=every) == runs


def test_every_accepts_what_durations_read_and_refuses_the_rest() -> None:
    assert next_runs(None, None, utc(2026, 1, 1, 0, 0, 5), 2, every="20s") == [
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 40),
    ]
    assert next_runs("", "Europe/Paris", utc(2026, 1, 1), 1, every=3600) == [utc(2026, 1, 1, 1)]
    for bad, words in [
        ("0.5s", "shorter than 1 second"),
        (0, "shorter than 1 second"),
        ("soon", "not a duration"),
        ("4000d", "longer than 10 years"),
        (10**20, "longer than 10 years"),
    ]:
        with pytest.raises(InvalidSchedule, match=words):
            next_runs(None, None, utc(2026, 1, 1), 1, every=bad)
    with pytest.raises(InvalidSchedule, match="not both"):
        next_runs("* * * * *", "UTC", utc(2026, 1, 1), 1, every="20s")
    with pytest.raises(InvalidSchedule, match="exactly one"):
        next_runs("", "UTC", utc(2026, 1, 1), 1)


def test_six_fields_read_the_last_as_the_second() -> None:
    assert validate_cron("  * * * *  * */20 ") == "* * * * * */20"
    assert next_runs("* * * * * */20", "UTC", utc(2026, 1, 1, 0, 0, 5), 3) == [
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 40),
        utc(2026, 1, 1, 0, 1, 0),
    ]
    assert next_runs("0 3 * * * 30", "UTC", utc(2026, 1, 1), 2) == [
        utc(2026, 1, 1, 3, 0, 30),
        utc(2026, 1, 2, 3, 0, 30),
    ]
    # Five fields are unchanged: second 0.
    assert next_runs("0 3 * * *", "UTC", utc(2026, 1, 1), 1) == [utc(2026, 1, 1, 3)]


def test_six_field_catch_up_counts_second_occurrences() -> None:
    due = due_occurrences(
        "* * * * * */20",
        "UTC",
        since=utc(2026, 1, 1, 0, 0, 0),
        now=utc(2026, 1, 1, 0, 10, 0),
        grace=timedelta(seconds=30),
        catch_up="run-all",
    )
    assert len(due) == 30 and due[0] == utc(2026, 1, 1, 0, 0, 20)
    assert due[-1] == utc(2026, 1, 1, 0, 10, 0)


SIX_FIELD_EXPRS = [
    "* * * * * */20",
    "*/5 * * * * 15,45",
    "0 3 * * * 30",
    "30 2 * * * 0-59/7",
    "0 */6 * * 1-5 10",
    "15 12 1 * * 59",
]


@settings(database=None, max_examples=200, deadline=None)
@given(
    expr=st.sampled_from(SIX_FIELD_EXPRS),
    tz=st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]),
    after=st.datetimes(
        min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
    ),
)
def test_six_field_crons_agree_with_croniters_own_iteration_away_from_dst(expr, tz, after):
    from croniter import croniter
    from hypothesis import assume

    zone = ZoneInfo(tz)
    runs = next_runs(expr, tz, after, 5)
    assert len(runs) == 5
    # Away from DST edges: one offset from ``after`` to a day past the last run.
    offsets = {(t).astimezone(zone).utcoffset() for t in (after, runs[-1] + timedelta(days=1))}
    hours = int((runs[-1] - after).total_seconds() // 3600) + 26
    offsets |= {(after + timedelta(hours=h)).astimezone(zone).utcoffset() for h in range(hours)}
    assume(len(offsets) == 1)
    wall = after.astimezone(zone).replace(tzinfo=None)
    walk = croniter(expr, wall)
    expected = []
    while len(expected) < 5:
        local = walk.get_next(datetime)
        instant = local.replace(tzinfo=zone).astimezone(UTC)
        if instant > after:
            expected.append(instant)
    assert runs == expected
