"""Parse the durations the public API accepts: "30s", "5m", "3d", a timedelta or seconds."""

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


def _invalid(value: object, name: str) -> InvalidDuration:
    return InvalidDuration(
        f"{name}={value!r} is not a duration. Write it as a number with a unit "
        '("250ms", "30s", "5m", "2h", "3d", "1w"), a timedelta, or a number of seconds.'
    )
