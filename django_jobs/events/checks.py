"""System checks for live events: ids ``django_jobs.E101`` and ``django_jobs.W101``..."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage, Error, register
from django.utils.module_loading import import_string

from ..durations import parse_duration
from ..exceptions import InvalidDuration

STORAGE = "django_jobs.events.sse.JobEventStorage"
CHANNEL_MANAGER = "django_jobs.events.sse.JobsChannelManager"


def _is_subclass(path: str | None, base: str) -> bool:
    if not path:
        return False
    try:
        return issubclass(import_string(path), import_string(base))
    except (ImportError, TypeError):
        return False


@register()
def check_live_events(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    jobs = getattr(settings, "JOBS", None) or {}
    retention = jobs.get("EVENT_RETENTION", "1d") if isinstance(jobs, dict) else "1d"
    if retention is not None:
        try:
            parse_duration(retention, name='JOBS["EVENT_RETENTION"]')
        except InvalidDuration as exc:
            messages.append(Error(exc.message, id="django_jobs.E101"))
    if not _is_subclass(getattr(settings, "EVENTSTREAM_STORAGE_CLASS", None), STORAGE):
        messages.append(
            checks.Warning(
                "EVENTSTREAM_STORAGE_CLASS is not django_jobs' JobEventStorage: the job event "
                "stream (GET events/) has no event ids, so a client that reconnects with "
                "Last-Event-ID cannot get what it missed.",
                hint=f'Set EVENTSTREAM_STORAGE_CLASS = "{STORAGE}" (it keeps storing other '
                "channels as eventstream's DjangoModelStorage does).",
                id="django_jobs.W101",
            )
        )
    if not _is_subclass(
        getattr(settings, "EVENTSTREAM_CHANNELMANAGER_CLASS", None), CHANNEL_MANAGER
    ):
        messages.append(
            checks.Warning(
                "EVENTSTREAM_CHANNELMANAGER_CLASS is not django_jobs' JobsChannelManager: any "
                "other django-eventstream view of the project would serve the job channels "
                "('jobs-operators', 'jobs-user-<pk>') to anyone who asks.",
                hint=f'Set EVENTSTREAM_CHANNELMANAGER_CLASS = "{CHANNEL_MANAGER}" '
                "(or a subclass of it).",
                id="django_jobs.W102",
            )
        )
    return messages
