"""Cron schedules in a named time zone: validation, next occurrences, and what a tick fires.

Pure functions: no database, no Django models, no settings.

A schedule is a 5-field cron expression (minute hour day-of-month month day-of-week), or a
6-field one whose last field is the second (as croniter and Procrastinate read it:
``* * * * * */20`` is every 20 seconds), read as wall-clock time in an IANA zone. Occurrences
follow that wall clock across DST changes (a 6-field time shifts with its minute):

* a matching local time that does not exist (it falls in a spring-forward gap) fires once, shifted
  forward by the gap: ``30 2 * * *`` fires at 03:30 local on a day the clock jumps 02:00 -> 03:00;
* a matching local time that happens twice (fall-back) fires once, at its first pass (fold=0);
* an instant reached from two local times fires once.

Or it is an interval, ``every``: occurrences at whole multiples of it from the Unix epoch,
in UTC (``every=20s``: :00, :20 and :40 of every minute), whatever the zone.

croniter's own time-zone handling is not used: croniter walks naive wall-clock times only, and
this module maps each one to UTC with ``zoneinfo``. Every datetime returned is an aware UTC
datetime (``datetime.timezone.utc``), and every list is strictly increasing.
"""

from __future__ import annotations

import difflib
import functools
import heapq
import re
import zoneinfo
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from croniter import CroniterBadDateError, croniter

from ...durations import parse_duration
from ...exceptions import InvalidDuration, InvalidSchedule

__all__ = [
    "CATCH_UP_CHOICES",
    "MAX_CATCH_UP",
    "MIN_EVERY",
    "due_occurrences",
    "next_runs",
    "occurrences_between",
    "validate_cron",
    "validate_every",
    "validate_tz",
]

CATCH_UP_CHOICES = ("skip", "run-once", "run-all")
"""What a tick does with missed occurrences: fire none, the latest one, or all of them."""

MAX_CATCH_UP = 1000
"""The most occurrences one tick fires from each of its two groups (missed, and on time)."""

MIN_EVERY = timedelta(seconds=1)
"""The shortest interval an ``every`` schedule may have."""

MAX_EVERY = timedelta(days=3660)
"""The longest: 10 years of 366 days (as far ahead as a job may be due)."""

_UTC = UTC
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
_TICK = timedelta(microseconds=1)  # datetime resolution: "> x - _TICK" is ">= x"

# Shorthands croniter accepts, written out as the 5 fields they stand for.
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week", "second")
# croniter's Jenkins-style "H" (hashed) and "R" (random) fields: not reproducible, so refused.
_HASHED_OR_RANDOM = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)
# Names available_timezones() may list that are not zones a schedule should pin itself to.
_NOT_IANA_ZONES = frozenset({"localtime", "posixrules", "Factory"})
# Probes (hours before ``after``) for the offset in effect before a recent spring-forward.
_OFFSET_PROBES = (timedelta(0), timedelta(hours=1), timedelta(hours=3), timedelta(hours=26))
_EXAMPLE_TZ = '"Europe/Paris", "America/New_York" or "UTC"'
_CRON_HELP = (
    'Write 5 fields, "minute hour day-of-month month day-of-week", '
    'e.g. "0 3 * * *" for 03:00 every day or "*/15 * * * 1-5" for every 15 minutes on weekdays, '
    'or a sixth field, last, for the second: "* * * * * */20" for every 20 seconds.'
)


# --- validation ----------------------------------------------------------------------------


def validate_tz(tz: str | None) -> zoneinfo.ZoneInfo:
    """Return the ``ZoneInfo`` for the IANA zone name ``tz`` or raise ``InvalidSchedule``.

    The zone is required: ``None`` and ``""`` are refused, as are names that are not IANA
    zones (``"Bogota"``, ``"EST5EDT "``, ``"localtime"``, ``"posix/..."``). The message names
    the bad zone and suggests close valid names where there are some (``"America/Bogota"``).
    """
    if tz is None or (isinstance(tz, str) and not tz.strip()):
        raise InvalidSchedule(
            f"A schedule needs tz, the IANA time zone its cron times are read in, "
            f"e.g. {_EXAMPLE_TZ}. Pass tz explicitly; there is no default."
        )
    if isinstance(tz, zoneinfo.ZoneInfo):
        raise InvalidSchedule(
            f"tz must be the zone's name, not a ZoneInfo object: pass tz={tz.key!r}."
        )
    if not isinstance(tz, str):
        raise InvalidSchedule(
            f"tz={tz!r} has type {type(tz).__name__}; pass an IANA zone name as a string, "
            f"e.g. {_EXAMPLE_TZ}."
        )
    if tz in zone_names():
        try:
            return zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # pragma: no cover
            pass  # listed but unreadable: report it like an unknown name
    suggestions = _suggest_zones(tz)
    hint = (
        "Did you mean " + " or ".join(repr(name) for name in suggestions) + "? "
        if suggestions
        else ""
    )
    raise InvalidSchedule(
        f"tz={tz!r} is not an IANA time zone. {hint}"
        f"Use a name from the IANA tz database (Area/City), e.g. {_EXAMPLE_TZ}."
    )


def validate_cron(expr: str) -> str:
    """Return ``expr`` normalized to its space-separated fields, or raise ``InvalidSchedule``.

    Accepts standard 5-field cron (``*``, lists, ranges, steps, month and day names, and
    croniter's ``L``, ``W``, ``#`` and ``?``), a sixth field, last, for the second (``0-59``,
    lists, ranges and steps: ``"0 3 * * * 30"`` is 03:00:30), plus the macros ``@hourly``,
    ``@daily``, ``@midnight``, ``@weekly``, ``@monthly``, ``@yearly`` and ``@annually``, which
    come back as their 5 fields. Refused: non-strings, empty strings, 7-field forms (years),
    hashed ``H`` and random ``R`` fields, out-of-range values, and expressions that can never
    fire (``0 0 30 2 *``).
    """
    if not isinstance(expr, str):
        raise InvalidSchedule(
            f"cron={expr!r} has type {type(expr).__name__}, not str. {_CRON_HELP}"
        )
    return _normalize_cron(expr)


@functools.lru_cache(maxsize=512)
def _normalize_cron(expr: str) -> str:
    fields = expr.split()
    if not fields:
        raise InvalidSchedule(f"cron is empty. {_CRON_HELP}")
    if len(fields) == 1 and fields[0].startswith("@"):
        macro = _MACROS.get(fields[0].lower())
        if macro is None:
            raise InvalidSchedule(
                f"cron={expr!r} is not a supported macro; use one of "
                f"{', '.join(sorted(_MACROS))}, or 5 fields. {_CRON_HELP}"
            )
        return macro
    if len(fields) not in (5, 6):
        extra = " Years are not supported." if len(fields) == 7 else ""
        raise InvalidSchedule(
            f"cron={expr!r} has {len(fields)} fields; it needs 5, or 6 with the second last."
            f"{extra} {_CRON_HELP}"
        )
    for name, field in zip(_FIELD_NAMES, fields, strict=False):
        if _HASHED_OR_RANDOM.fullmatch(field):
            raise InvalidSchedule(
                f"cron={expr!r}: the {name} field {field!r} is a hashed (H) or random (R) "
                f"value, which would fire at a different time on each process. "
                f"Write the value itself, e.g. a number."
            )
    normalized = " ".join(fields)
    try:
        walk = croniter(normalized, datetime(2000, 1, 1))
    except (ValueError, TypeError, LookupError, OverflowError) as exc:
        # croniter's errors are ValueErrors; the others guard against odd input it chokes on.
        raise InvalidSchedule(
            f"cron={expr!r} is not a valid cron expression ({exc}). {_CRON_HELP}"
        ) from exc
    try:
        walk.get_next(datetime)
    except CroniterBadDateError as exc:
        raise InvalidSchedule(
            f"cron={expr!r} never fires: no date matches its day-of-month and month fields "
            f"(like day 30 in February). Pick a day of the month that exists in those months."
        ) from exc
    return normalized


def validate_every(every: object) -> timedelta:
    """Return the interval ``every`` as a ``timedelta`` of at least 1 s (whole microseconds),
    or raise ``InvalidSchedule``. Accepts what ``parse_duration`` reads: ``"20s"``, ``"5m"``,
    a ``timedelta`` or a number of seconds."""
    try:
        span = parse_duration(every, name="every")  # type: ignore[arg-type]
    except InvalidDuration as exc:
        raise InvalidSchedule(exc.message) from None
    except OverflowError:
        span = MAX_EVERY + MIN_EVERY
    if span > MAX_EVERY:
        raise InvalidSchedule(
            f"every={every!r} is longer than 10 years; write a shorter interval, or use cron "
            'for calendar times (e.g. "0 0 1 1 *" for each new year).'
        )
    if span < MIN_EVERY:
        raise InvalidSchedule(
            f"every={every!r} is shorter than 1 second; a schedule fires at most once a "
            'second. Write at least "1s" (e.g. "20s", "5m"), or use cron for calendar times.'
        )
    return span


@functools.cache
def zone_names() -> frozenset[str]:
    """The zone names ``validate_tz`` accepts (the API's schema lists them)."""
    return frozenset(zoneinfo.available_timezones() - _NOT_IANA_ZONES)


def _suggest_zones(bad: str, limit: int = 3) -> list[str]:
    names = sorted(zone_names(), key=lambda name: (len(name), name))
    wanted = bad.strip().replace(" ", "_")
    lowered = wanted.lower()
    exact = [name for name in names if name.lower() == lowered]
    if exact:
        return exact[:limit]
    last = lowered.rsplit("/", 1)[-1]
    same_city = [name for name in names if name.rsplit("/", 1)[-1].lower() == last]
    if same_city:
        return same_city[:limit]
    by_lower = {name.lower(): name for name in names}
    close = difflib.get_close_matches(lowered, list(by_lower), n=limit, cutoff=0.6)
    if close:
        return [by_lower[name] for name in close]
    cities: dict[str, str] = {}
    for name in names:  # shortest first, so a city maps to its shortest zone name
        cities.setdefault(name.rsplit("/", 1)[-1].lower(), name)
    close = difflib.get_close_matches(last, list(cities), n=limit, cutoff=0.75)
    return [cities[city] for city in close]


def _as_utc(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(
            f"{name}={value!r} has type {type(value).__name__}; pass an aware datetime, "
            f"e.g. django.utils.timezone.now()."
        )
    if value.utcoffset() is None:
        raise ValueError(
            f"{name}={value!r} is naive; pass an aware datetime, e.g. "
            f"django.utils.timezone.now() or datetime.now(timezone.utc)."
        )
    return value.astimezone(_UTC)


# --- iteration -----------------------------------------------------------------------------


def _iter_instants(expr: str, zone: zoneinfo.ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Yield the occurrences strictly after ``after`` (aware UTC), strictly increasing."""
    last = after
    for instant in _walk(expr, zone, after):
        if instant > last:  # drops instants reached twice, and those not after ``after``
            last = instant
            yield instant


def _walk(expr: str, zone: zoneinfo.ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Yield the instants of the wall-clock matches from shortly before ``after``, ascending.

    croniter walks naive wall-clock matches; each maps to UTC with fold=0, which zoneinfo
    defines as the offset in effect before a transition. For an ambiguous time that is its
    first pass; for a nonexistent one it is the time shifted forward by the gap.

    Mapped that way, instants from existing local times rise with the wall clock. Only the
    instants from gap times break the order: a gap ``[G, G+d)`` maps onto ``[T, T+d)`` (T the
    transition), which the existing times right after the gap, ``[G+d, G+2d)``, map onto too.
    So gap instants wait in a heap until the walk has passed them; an existing time's instant
    is final as soon as it is seen, since every later one is larger. The output is ascending
    but may repeat an instant, and starts before ``after``: the caller filters.
    """
    # A nonexistent time maps up to a gap's width later than its wall reading, so start the
    # walk early enough (offset from before a recent spring-forward) to see the gap times
    # whose instants still lie after ``after``.
    offset = min(_utcoffset((after - back).astimezone(zone)) for back in _OFFSET_PROBES)
    walk = croniter(expr, after.replace(tzinfo=None) + offset, ret_type=datetime)
    pending: list[datetime] = []  # heap of instants from nonexistent wall times
    while True:
        try:
            wall = walk.get_next(datetime)
        except (ValueError, OverflowError):  # no further match (croniter) or past year 9999
            break
        before = _utcoffset(wall.replace(tzinfo=zone))
        later = _utcoffset(wall.replace(tzinfo=zone, fold=1))
        instant = (wall - before).replace(tzinfo=_UTC)
        if before < later:  # nonexistent: instant lies in [T, T+gap); all later ones >= T
            floor = instant - (later - before)
            while pending and pending[0] < floor:
                yield heapq.heappop(pending)
            heapq.heappush(pending, instant)
            continue
        while pending and pending[0] <= instant:
            yield heapq.heappop(pending)
        yield instant
    while pending:
        yield heapq.heappop(pending)


def _utcoffset(aware: datetime) -> timedelta:
    return aware.utcoffset() or timedelta(0)


def _latest(
    expr: str, zone: zoneinfo.ZoneInfo, after: datetime, until: datetime, count: int
) -> list[datetime]:
    """The latest ``count`` occurrences in ``(after, until]``, ascending, without walking them all.

    A short range is walked forward directly. A long one is narrowed first: croniter steps
    ``count`` wall-clock matches back from ``until`` to a start, and the forward walk from that
    start is checked to have produced ``count`` occurrences (widening when gap duplicates made
    it fall short). The work is about ``3 * count`` croniter steps, whatever the range.
    """
    if count <= 0 or until <= after:
        return []
    window: deque[datetime] = deque(maxlen=count)
    for instant in _iter_instants(expr, zone, after):
        if instant > until:
            return list(window)
        if len(window) == count:
            break  # more than ``count``: narrow the range instead of walking all of it
        window.append(instant)
    else:
        return list(window)

    walk = croniter(expr, until.astimezone(zone).replace(tzinfo=None, fold=0) + _TICK)
    wall: datetime | None = None
    try:
        for _ in range(count):
            wall = walk.get_prev(datetime)
    except (ValueError, OverflowError):
        wall = None
    lower = after
    if wall is not None:
        lower = max(after, min(until, wall.replace(tzinfo=zone).astimezone(_UTC) - _TICK))
    while True:
        window.clear()
        for instant in _iter_instants(expr, zone, lower):
            if instant > until:
                break
            window.append(instant)
        if len(window) == count or lower <= after:
            return list(window)
        lower = max(after, until - max((until - lower) * 2, timedelta(days=1)))


def _every_first(step: timedelta, after: datetime) -> datetime:
    """The first multiple of ``step`` from the epoch strictly after ``after`` (exact: whole
    microseconds)."""
    micros = step // _MICRO
    since = (after - _EPOCH) // _MICRO
    return _EPOCH + (since // micros + 1) * micros * _MICRO


def _every_iter(step: timedelta, after: datetime) -> Iterator[datetime]:
    instant = _every_first(step, after)
    while True:
        yield instant
        try:
            instant = instant + step
        except OverflowError:  # past year 9999
            return


def _every_latest(step: timedelta, after: datetime, until: datetime, count: int) -> list[datetime]:
    """The latest ``count`` multiples of ``step`` in ``(after, until]``, ascending."""
    if count <= 0 or until <= after:
        return []
    last = _every_first(step, until) - step  # the last multiple <= until
    first = _every_first(step, after)
    if last < first:
        return []
    total = (last - first) // step + 1
    start = last - (min(total, count) - 1) * step
    return [start + n * step for n in range(min(total, count))]


class _Timing:
    """A schedule's occurrences, by cron in a zone or by interval: ``after`` yields them
    strictly after an instant; ``latest`` the last ``count`` in a range."""

    def __init__(self, cron: str | None, tz: str | None, every: object) -> None:
        if every is not None:
            if cron:
                raise InvalidSchedule(_BOTH)
            self.every: timedelta | None = validate_every(every)
            if tz is not None:
                validate_tz(tz)
            return
        self.every = None
        if cron is None or cron == "":
            raise InvalidSchedule(_NEITHER)
        self.expr = validate_cron(cron)
        self.zone = validate_tz(tz)

    def after(self, start: datetime) -> Iterator[datetime]:
        if self.every is not None:
            return _every_iter(self.every, start)
        return _iter_instants(self.expr, self.zone, start)

    def latest(self, after: datetime, until: datetime, count: int) -> list[datetime]:
        if self.every is not None:
            return _every_latest(self.every, after, until, count)
        return _latest(self.expr, self.zone, after, until, count)


_BOTH = (
    "A schedule fires by cron or by every, not both: keep one (cron for calendar times such "
    'as "0 3 * * *", every for a fixed interval such as "20s").'
)
_NEITHER = (
    'A schedule needs cron (e.g. "0 3 * * *", or "* * * * * */20" with seconds) or every '
    '(an interval such as "20s" or "5m"); give exactly one.'
)


# --- public API ----------------------------------------------------------------------------


def next_runs(
    cron: str | None, tz: str | None, after: datetime, n: int = 5, *, every: object = None
) -> list[datetime]:
    """Return the next ``n`` occurrences of ``cron`` in ``tz`` (or of the interval ``every``,
    with ``cron`` empty) strictly after ``after``.

    ``after`` must be aware. The result holds aware UTC datetimes, strictly increasing; it is
    shorter than ``n`` only when the schedule stops firing (datetime's year 9999).
    Raises ``InvalidSchedule`` for a bad cron, zone or interval (or both cron and every, or
    neither), ``ValueError`` for a naive ``after``.
    """
    timing = _Timing(cron, tz, every)
    start = _as_utc(after, "after")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r} must be a whole number >= 0 (how many occurrences to return).")
    runs: list[datetime] = []
    if n == 0:
        return runs
    for instant in timing.after(start):
        runs.append(instant)
        if len(runs) == n:
            break
    return runs


def occurrences_between(
    cron: str | None,
    tz: str | None,
    after: datetime,
    until: datetime,
    limit: int = 1000,
    *,
    every: object = None,
) -> list[datetime]:
    """Return the occurrences of ``cron`` in ``tz`` (or of ``every``) in ``(after, until]``:
    the earliest ``limit``.

    ``after`` and ``until`` must be aware. The result holds aware UTC datetimes, strictly
    increasing, at most ``limit`` of them (the earliest ones when the range holds more).
    Raises ``InvalidSchedule`` for a bad cron, zone or interval, ``ValueError`` for a naive
    datetime.
    """
    timing = _Timing(cron, tz, every)
    start = _as_utc(after, "after")
    end = _as_utc(until, "until")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit={limit!r} must be a whole number >= 0.")
    found: list[datetime] = []
    if limit == 0 or end <= start:
        return found
    for instant in timing.after(start):
        if instant > end:
            break
        found.append(instant)
        if len(found) == limit:
            break
    return found


def due_occurrences(
    cron: str | None,
    tz: str | None,
    *,
    since: datetime,
    now: datetime,
    grace: timedelta,
    catch_up: str,
    every: object = None,
) -> list[datetime]:
    """Return the occurrences a scheduler tick at ``now`` fires, ascending (aware UTC).

    ``every`` instead of ``cron``: an interval schedule (``cron`` then empty or None).

    ``since`` is the last instant already handled (the previous tick, or the schedule's first
    sync); the candidates are the occurrences in ``(since, now]``. A candidate is *missed*
    when ``now - occurrence > grace``. Candidates that are not missed always fire. Missed ones
    fire by ``catch_up``:

    * ``"skip"``: none of them;
    * ``"run-once"``: only the latest missed one;
    * ``"run-all"``: all of them, but at most ``MAX_CATCH_UP`` (the latest ones).

    As a safety bound the on-time group is also cut to its latest ``MAX_CATCH_UP`` (it only
    grows that large with a very long ``grace``). However long the gap since ``since``, the
    work is bounded by those caps, not by the number of occurrences in the gap.

    ``since`` and ``now`` must be aware datetimes (``ValueError`` otherwise). ``grace`` is a
    ``timedelta`` (or anything ``parse_duration`` reads, like ``"5m"``); a negative one raises
    ``InvalidDuration``. Raises ``InvalidSchedule`` for a bad cron, zone or ``catch_up``.
    """
    if catch_up not in CATCH_UP_CHOICES:
        raise InvalidSchedule(
            f"catch_up={catch_up!r} is not a catch-up policy; use one of "
            f'{", ".join(repr(choice) for choice in CATCH_UP_CHOICES)} ("skip" drops missed '
            f'runs, "run-once" fires the latest missed run, "run-all" fires up to '
            f"{MAX_CATCH_UP} of them)."
        )
    timing = _Timing(cron, tz, every)
    start = _as_utc(since, "since")
    end = _as_utc(now, "now")
    window = parse_duration(grace, name="grace")
    if end <= start:
        return []
    cutoff = end - window  # occurrences before the cutoff are missed
    on_time = timing.latest(max(start, cutoff - _TICK), end, MAX_CATCH_UP)
    wanted = {"skip": 0, "run-once": 1, "run-all": MAX_CATCH_UP}[catch_up]
    missed = timing.latest(start, cutoff - _TICK, wanted)
    return missed + on_time
