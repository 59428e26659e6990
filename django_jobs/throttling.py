"""Throttles kept in the jobs database, so that a budget holds across every web process.

A budget is a rate such as ``"60/m"`` (``durations.parse_rate``) spent by a key: ``member:<pk>``
for a member's submits and schedule creations (``JOBS["MEMBER_RATE"]``), ``auth:<address>`` for
refused credentials (``JOBS["AUTH_FAILURE_RATE"]``). Each key has one ``Throttle`` row (a generic
cell rate algorithm: the row holds the moment the budget is whole again), spent by one statement
that writes only if the row still holds what was read, so two requests, threads or processes
never both spend the last unit. Django's cache would also do, but its
default backend is per process: a project would need a shared ``CACHES`` for the limit to mean
anything, and a forgotten setting would silently multiply the rate by the number of processes.

Times come from ``clock.now()``: tests move the clock, they never sleep.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from . import clock
from .conf import jobs_settings
from .durations import parse_rate
from .models import Throttle

__all__ = [
    "accepted_credentials",
    "check_failed_credentials",
    "credentials_user",
    "give_back",
    "retry_after",
    "retry_after_header",
    "spend",
    "time_to_wait",
]


def _shape(rate: str) -> tuple[timedelta, timedelta]:
    """A rate's interval between two requests and the burst it tolerates."""
    count, window = parse_rate(rate)
    interval = window / count
    return interval, window - interval


def spend(key: str, rate: str, *, now: datetime | None = None) -> float | None:
    """Spend one unit of ``key``'s budget: ``None`` if it was there, else the seconds until it
    is (nothing is spent then).

    The unit is taken by one statement that names the value it read (``UPDATE ... WHERE
    until = <read>``): when another request spent in between, nothing is written and the read
    is done again, with the clock read again. So requests sent at once never spend one unit
    twice, on any database and under any isolation level, and no lock is held while waiting.
    """
    interval, tolerance = _shape(rate)
    window = interval + tolerance
    rows = Throttle.objects.using(jobs_settings.DATABASE)
    for _ in range(_ATTEMPTS):
        moment = now or clock.now()
        until = rows.filter(key=key).values_list("until", flat=True).first()
        if until is None:
            rows.filter(until__lt=moment).delete()  # spent budgets that are whole again
            rows.bulk_create([Throttle(key=key, until=moment)], ignore_conflicts=True)
            continue
        if until - moment > 2 * window:
            # Spending never moves ``until`` further than a window ahead of the moment it was
            # spent at, and a moment read a little late (another request spent in between)
            # is behind by far less than a window: the clock itself went back (a corrected
            # system clock, a test's moved clock). The budget is whole again rather than shut
            # for the gap. Nothing short of that resets it.
            rows.filter(key=key, until=until).update(until=moment)
            continue
        start = max(min(until, moment + window), moment)
        if start - moment > tolerance:
            return (start - moment - tolerance).total_seconds()
        if rows.filter(key=key, until=until).update(until=start + interval):
            return None
    return interval.total_seconds()  # spent by others every time it was read: refused


def give_back(key: str, rate: str) -> None:
    """Return one unit spent by ``spend`` (a request that turned out not to count)."""
    interval, _tolerance = _shape(rate)
    rows = Throttle.objects.using(jobs_settings.DATABASE)
    for _ in range(_ATTEMPTS):
        until = rows.filter(key=key).values_list("until", flat=True).first()
        if until is None or rows.filter(key=key, until=until).update(until=until - interval):
            return


#: Reads of one budget before a request gives up (each failed one means another request
#: spent a unit in between, so this bounds nothing a real load reaches).
_ATTEMPTS = 200


def time_to_wait(key: str, rate: str, *, now: datetime | None = None) -> float | None:
    """Like ``spend``, without spending: ``None`` while the budget has a unit left."""
    interval, tolerance = _shape(rate)
    now = now or clock.now()
    until = (
        Throttle.objects.using(jobs_settings.DATABASE)
        .filter(key=key)
        .values_list("until", flat=True)
        .first()
    )
    if until is None:
        return None
    start = max(min(until, now + interval + tolerance), now)
    if start - now <= tolerance:
        return None
    return (start - now - tolerance).total_seconds()


def retry_after(seconds: float) -> int:
    """Seconds as a ``Retry-After`` value: whole, and at least 1."""
    return max(1, math.ceil(seconds))


# --- refused credentials (JOBS["AUTH_FAILURE_RATE"]) ----------------------------------------


def client_address(request: Any) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")[:100]  # not a state: no address


def check_failed_credentials(request: Any) -> None:
    """Before credentials are checked: take one unit of this address's budget of refusals,
    or answer 429 when it is spent.

    The unit is taken before the check, not after a refusal: requests sent at once would all
    pass a look at the budget before any of them is refused, and each would cost a password
    hash. Credentials that are accepted give it back (``accepted_credentials``), so only
    refusals stay counted; at most the budget's count of checks run at once per address.
    """
    from rest_framework.exceptions import Throttled

    rate = jobs_settings.AUTH_FAILURE_RATE
    if not rate:
        return
    wait = spend(f"auth:{client_address(request)}", rate)
    if wait is not None:
        seconds = retry_after(wait)
        raise Throttled(
            wait=seconds,
            detail=(
                "Too many refused credentials from this address "
                f'(JOBS["AUTH_FAILURE_RATE"] is {rate}). Check the username and password, then '
                "send it again later."
            ),
        )


def accepted_credentials(request: Any) -> None:
    """The credentials checked after ``check_failed_credentials`` were not refused: give the
    unit back."""
    rate = jobs_settings.AUTH_FAILURE_RATE
    if rate:
        give_back(f"auth:{client_address(request)}", rate)


def retry_after_header(exc: Any) -> str:
    """The ``Retry-After`` value of DRF's ``Throttled``: whole seconds, set by its constructor
    as ``wait`` (an attribute its type stubs do not declare)."""
    return str(getattr(exc, "wait", None) or 1)


def credentials_user(request: Any) -> Any:
    """The user the API's authenticators find in a plain Django request's ``Authorization``
    header, or None when they refuse it; under the same budget of refusals as the API.

    Raises ``Throttled`` before any password is hashed when the address has spent it: without
    the budget, a view outside DRF would hash a password for every guess it is sent.
    """
    from rest_framework.exceptions import AuthenticationFailed
    from rest_framework.request import Request
    from rest_framework.settings import api_settings

    authenticators = [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    check_failed_credentials(request)
    try:
        user = Request(request, authenticators=authenticators).user
    except AuthenticationFailed:
        return None  # the unit taken stays spent: a refusal
    except BaseException:
        accepted_credentials(request)
        raise
    accepted_credentials(request)
    return user
