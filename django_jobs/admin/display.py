"""How the admin shows jobs: badges, bars, timestamps, JSON, and the live-update context."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.urls import NoReverseMatch, reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..signals import EVENT_TYPES
from ..states import JobState

#: Job states in the order the overview shows them.
STATES: tuple[str, ...] = tuple(JobState.values)
#: Payloads and results longer than this (as pretty JSON) are cut on the job page.
JSON_DISPLAY_LIMIT = 100_000
#: How many minutes the overview's throughput covers.
THROUGHPUT_MINUTES = 10
#: How often a page without the live event stream reloads itself, in seconds.
REFRESH_SECONDS = 5
EMPTY = "-"
#: Timestamps on the list and the job page: sortable, to the second.
TIMESTAMP_FORMAT = "Y-m-d H:i:s"


# -- display helpers: HTML fragments shared by the list, the job page and the overview ------------


def state_badge(state: str) -> SafeString:
    """A colored badge for a job or step state (CSS in ``django_jobs/admin.css``)."""
    return format_html('<span class="djj-badge djj-state-{}">{}</span>', state, state)


def progress_bar(progress: dict[str, Any] | None) -> SafeString | str:
    """A progress bar from ``progress.percent`` with the stage beside it; "-" without one."""
    progress = progress or {}
    percent, stage = progress.get("percent"), progress.get("stage")
    if percent is None:
        return format_html('<span class="djj-stage">{}</span>', stage) if stage else EMPTY
    try:
        value = max(0.0, min(100.0, float(percent)))
    except (TypeError, ValueError):
        return EMPTY
    return format_html(
        '<span class="djj-progress"><progress max="100" value="{}" aria-label="{}%">'
        '</progress> <span class="djj-percent">{}%</span>{}</span>',
        f"{value:g}",
        f"{value:g}",
        f"{value:g}",
        format_html(' <span class="djj-stage" title="{}">{}</span>', stage, stage) if stage else "",
    )


def timestamp(value: datetime | None, derived: bool = False) -> SafeString | str:
    """A timestamp to the second, in the current time zone; "≈" beside it when derived."""
    if value is None:
        return EMPTY
    local = timezone.template_localtime(value)  # type: ignore[attr-defined]  # not in the stubs
    text = formats.date_format(local, TIMESTAMP_FORMAT)
    if not derived:
        return format_html('<span class="djj-time">{}</span>', text)
    return format_html(
        '<span class="djj-time djj-derived" title="Estimated: this row lacked timestamps its '
        'state implies; they were derived from the ones it has.">≈ {}</span>',
        text,
    )


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, ensure_ascii=False, cls=DjangoJSONEncoder)
    if len(text) > JSON_DISPLAY_LIMIT:
        text = text[:JSON_DISPLAY_LIMIT] + "\n… (cut here; `manage.py jobs inspect` shows it all)"
    return format_html('<pre class="djj-json">{}</pre>', text)


def duration(seconds: float | None) -> str:
    """``95.2`` -> ``"1m 35s"``; ``None`` -> ``"-"``."""
    if seconds is None:
        return EMPTY
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def milliseconds(value: float | None) -> str:
    if value is None:
        return EMPTY
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def events_url() -> str | None:
    """The live event stream's URL, or None when the project does not route it."""
    try:
        return reverse("django_jobs:events")
    except NoReverseMatch:
        return None


def live_context(job_id: int | None = None) -> dict[str, Any]:
    """What the pages' live-update script needs (see ``django_jobs/admin_live.js``); a job's
    page follows that job's stream only (its events and its children's)."""
    url = events_url()
    if url is not None and job_id is not None:
        url = f"{url}?job={int(job_id)}"
    return {
        "djj_events_url": url,
        "djj_event_types": json.dumps(list(EVENT_TYPES)),
        "djj_live_job": job_id,
        "djj_refresh_seconds": REFRESH_SECONDS,
    }


# -- jobs -----------------------------------------------------------------------------------------
