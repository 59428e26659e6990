"""The API's throttles, answered 429 with ``Retry-After`` (docs/security.md).

* ``MemberRateThrottle``: a member's submits and schedule creations share one budget,
  ``JOBS["MEMBER_RATE"]`` (default ``"60/m"``). Operators are not throttled.
* ``check_failed_credentials``/``count_failed_credentials``: refused credentials cost a
  password hash each (hundreds of milliseconds, on purpose); past ``JOBS["AUTH_FAILURE_RATE"]``
  refusals from one client address, requests from it that carry credentials are answered 429
  before any hashing, until the budget is whole again.

Both are counted in the jobs database (``django_jobs.throttling``), so they hold across web
processes without a shared cache.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import Throttled
from rest_framework.throttling import BaseThrottle

from ..conf import jobs_settings
from ..permissions import is_operator
from ..throttling import retry_after, spend, time_to_wait


class MemberRateThrottle(BaseThrottle):
    """One budget per member for the requests that add work: submits, schedule creations."""

    def __init__(self) -> None:
        self.wait_seconds: float | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        rate = jobs_settings.MEMBER_RATE
        user = request.user
        if not rate or is_operator(user):
            return True
        self.wait_seconds = spend(f"member:{user.pk}", rate)
        return self.wait_seconds is None

    def wait(self) -> float | None:
        return self.wait_seconds


def member_throttled(wait: float | None) -> Throttled:
    seconds = retry_after(wait or 1)
    return Throttled(
        wait=seconds,
        detail=(
            f"Too many submits and schedule creations: members may make "
            f'{jobs_settings.MEMBER_RATE} (JOBS["MEMBER_RATE"]). Send it again in {seconds} s.'
        ),
    )


def client_address(request: Any) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")[:100]  # not a state: no address


def check_failed_credentials(request: Any) -> None:
    """429 before authenticating when this address has spent its budget of refusals."""
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
                f"send it again in {seconds} s."
            ),
        )


def count_failed_credentials(request: Any) -> None:
    rate = jobs_settings.AUTH_FAILURE_RATE
    if rate:
        spend(f"auth:{client_address(request)}", rate)
