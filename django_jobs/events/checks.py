"""System checks for live events: ``django_jobs.E201``.

The job streams need no ``EVENTSTREAM_*`` setting (their view carries its storage and channel
rules), so none is checked; a project's own eventstream settings do not reach them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from ..durations import parse_duration
from ..exceptions import InvalidDuration


@register()
def check_live_events(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    jobs = getattr(settings, "JOBS", None) or {}
    retention = jobs.get("EVENT_RETENTION", "1d") if isinstance(jobs, dict) else "1d"
    if retention is not None:
        try:
            parse_duration(retention, name='JOBS["EVENT_RETENTION"]')
        except InvalidDuration as exc:
            messages.append(
                Error(
                    exc.message,
                    hint='Set JOBS["EVENT_RETENTION"] to a duration like "1d", or None to keep '
                    "every event.",
                    id="django_jobs.E201",
                )
            )
    return messages
