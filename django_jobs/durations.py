"""Parse the durations and rates the public API accepts: "30s", "5m", a timedelta or seconds;
"100/m", "5/10s"."""

from __future__ import annotations

import re
from datetime import timedelta

from .exceptions import InvalidDuration

Duration = str | int | float | timedelta

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")


def parse_duration(value: Duration, *, name: str = "duration") -> timedelta:
    """Return ``value`` as a non-negative ``timedelta`` or raise ``InvalidDuration``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise _invalid(value, name)
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise _invalid(value, name)
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise _invalid(value, name)
    if seconds < 0 or seconds != seconds:  # negative or NaN
        raise _invalid(value, name)
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """``value`` in the largest unit that writes it whole (``"20s"``, ``"5m"``, ``"1d"``);
    ``parse_duration`` reads it back to the same ``timedelta``."""
    micros = value // timedelta(microseconds=1)
    for unit, seconds in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if micros and micros % (seconds * 1_000_000) == 0:
            return f"{micros // (seconds * 1_000_000)}{unit}"
    if micros % 1000 == 0:
        return f"{micros // 1000}ms"
    return f"{micros / 1_000_000:.6f}".rstrip("0") + "s"


def _invalid(value: object, name: str) -> InvalidDuration:
    return InvalidDuration(
        f"{name}={value!r} is not a duration. Write it as a number with a unit "
        '("250ms", "30s", "5m", "2h", "3d", "1w"), a timedelta, or a number of seconds.'
    )


_RATE_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|m|h|d)\s*$")
_RATE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(value: str) -> tuple[int, timedelta]:
    """``"100/m"`` -> (100, 60 s); ``"5/10s"`` -> (5, 10 s)."""
    match = _RATE_PATTERN.match(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ValueError(
            f"rate={value!r} is not a rate. Write starts per window: '100/m', '5/s', '1000/h', "
            "'20/10s'."
        )
    count = int(match.group(2) or 1) * _RATE_UNITS[match.group(3)]
    return int(match.group(1)), timedelta(seconds=count)
