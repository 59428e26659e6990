"""Throttles kept in the jobs database, so that a budget holds across every web process.

A budget is a rate such as ``"60/m"`` (``durations.parse_rate``) spent by a key: ``member:<pk>``
for a member's submits and schedule creations (``JOBS["MEMBER_RATE"]``), ``auth:<address>`` for
refused credentials (``JOBS["AUTH_FAILURE_RATE"]``). Each key has one ``Throttle`` row, updated
under a row lock (a generic cell rate algorithm: the row holds the moment the budget is whole
again), so two processes never both spend the last unit. Django's cache would also do, but its
default backend is per process: a project would need a shared ``CACHES`` for the limit to mean
anything, and a forgotten setting would silently multiply the rate by the number of processes.

Times come from ``clock.now()``: tests move the clock, they never sleep.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from . import clock
from .conf import jobs_settings
from .durations import parse_rate
from .models import Throttle

__all__ = [
    "check_failed_credentials",
    "count_failed_credentials",
    "credentials_user",
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
    is (nothing is spent then)."""
    interval, tolerance = _shape(rate)
    now = now or clock.now()
    alias = jobs_settings.DATABASE
    rows = Throttle.objects.using(alias)
    with transaction.atomic(using=alias):
        row = rows.select_for_update().filter(key=key).first()
        if row is None:
            rows.filter(until__lt=now).delete()  # spent budgets that are whole again
            rows.bulk_create([Throttle(key=key, until=now)], ignore_conflicts=True)
            row = rows.select_for_update().get(key=key)
        start = max(_believable(row.until, now, interval + tolerance), now)
        if start - now > tolerance:
            return (start - now - tolerance).total_seconds()
        row.until = start + interval
        row.save(using=alias, update_fields=["until"])
    return None


def time_to_wait(key: str, rate: str, *, now: datetime | None = None) -> float | None:
    """Like ``spend``, without spending: ``None`` while the budget has a unit left."""
    _interval, tolerance = _shape(rate)
    now = now or clock.now()
    until = (
        Throttle.objects.using(jobs_settings.DATABASE)
        .filter(key=key)
        .values_list("until", flat=True)
        .first()
    )
    if until is None or _believable(until, now, _interval + tolerance) - now <= tolerance:
        return None
    return (until - now - tolerance).total_seconds()


def _believable(until: datetime, now: datetime, window: timedelta) -> datetime:
    """``until`` as stored, or ``now`` if it lies more than a whole ``window`` ahead: spending
    never moves it further than that, so the clock went back since (a corrected system clock,
    or a test's moved clock) and the budget is whole again rather than shut for the gap."""
    return now if until - now > window else until


def retry_after(seconds: float) -> int:
    """Seconds as a ``Retry-After`` value: whole, and at least 1."""
    return max(1, math.ceil(seconds))


# --- refused credentials (JOBS["AUTH_FAILURE_RATE"]) ----------------------------------------


def client_address(request: Any) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")[:100]  # not a state: no address


def check_failed_credentials(request: Any) -> None:
    """429 before authenticating when this address has spent its budget of refusals."""
    from rest_framework.exceptions import Throttled

    rate = jobs_settings.AUTH_FAILURE_RATE
    if not rate:
        return
    wait = time_to_wait(f"auth:{client_address(request)}", rate)
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


def retry_after_header(exc: Any) -> str:
    """The ``Retry-After`` value of DRF's ``Throttled``: whole seconds, set by its constructor
    as ``wait`` (an attribute its type stubs do not declare)."""
    return str(getattr(exc, "wait", None) or 1)


def count_failed_credentials(request: Any) -> None:
    rate = jobs_settings.AUTH_FAILURE_RATE
    if rate:
        spend(f"auth:{client_address(request)}", rate)


def credentials_user(request: Any) -> Any:
    """The user the API's authenticators find in a plain Django request's ``Authorization``
    header, or None when they refuse it; under the same budget of refusals as the API.

    Raises ``Throttled`` before any password is hashed when the address has spent it: without
    the budget, a view outside DRF would hash a password for every guess it is sent.
    """
    from rest_framework.exceptions import AuthenticationFailed
    from rest_framework.request import Request
    from rest_framework.settings import api_settings

    authenticators = [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]  # type: ignore[operator]  # classes once imported; the stubs say str
    check_failed_credentials(request)
    try:
        return Request(request, authenticators=authenticators).user
    except AuthenticationFailed:
        count_failed_credentials(request)
        return None
