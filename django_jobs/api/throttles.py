"""The API's throttles, answered 429 with ``Retry-After`` (docs/security.md).

* ``MemberRateThrottle``: a member's submits, retries and schedule creations share one budget,
  ``JOBS["MEMBER_RATE"]`` (default ``"60/m"``). Operators are not throttled.
* ``check_failed_credentials``/``accepted_credentials`` (``django_jobs.throttling``):
  refused credentials cost a password hash each (hundreds of milliseconds, on purpose); each
  check takes a unit of ``JOBS["AUTH_FAILURE_RATE"]`` per client address before hashing, and
  accepted credentials give it back; once refusals spent it, requests from that address that
  carry credentials are answered 429 before any hashing, until the budget is whole again.

Both are counted in the jobs database (``django_jobs.throttling``), so they hold across web
processes without a shared cache. ``throttling.credentials_user`` applies the same budget to
the plain Django views that accept the API's credentials (the event stream, the metrics).
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import Throttled
from rest_framework.throttling import BaseThrottle

from ..conf import jobs_settings
from ..permissions import is_operator
from ..throttling import retry_after, spend


class MemberRateThrottle(BaseThrottle):
    """One budget per member for the requests that add work: submits, retries, schedule
    creations (and the jobs their schedules fire, ``engine.scheduler``)."""

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
            f"Too many submits, retries and schedule creations: members may make "
            f'{jobs_settings.MEMBER_RATE} (JOBS["MEMBER_RATE"]). Send it again later.'
        ),
    )
