"""How the admin shows jobs: badges, bars, timestamps, JSON, and the live-update context."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import django
from django.contrib.admin import AdminSite
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import formats, timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe

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
#: Every date and time the admin shows (jobs, steps, schedules): sortable, to the second, with
#: the time zone's abbreviation ("2026-12-02 14:03:05 UTC"), in the active time zone.
DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s T"

#: Django 5.2's admin renders the object-tools block inside the content block, which the
#: fleet's pages (overview, workers, charts) replace; Django 6 renders it beside the title. On
#: 5.2 those pages include their tools at the top of their content instead.
TOOLS_IN_CONTENT = django.VERSION < (6, 0)


# -- display helpers: HTML fragments shared by the list, the job page and the overview ------------


def state_badge(state: str) -> SafeString:
    """A colored badge for a job or step state (CSS in ``django_jobs/admin.css``)."""
    return format_html('<span class="djj-badge djj-state-{}">{}</span>', state, state)


def progress_bar(progress: dict[str, Any] | None, state: str | None = None) -> SafeString | str:
    """A progress bar from ``progress.percent`` with the stage beside it; nothing for a job that
    never reported progress (most jobs), and 100 % for a succeeded job that did."""
    progress = progress or {}
    percent, stage = progress.get("percent"), progress.get("stage")
    if percent is None:
        return format_html('<span class="djj-stage">{}</span>', stage) if stage else ""
    try:
        value = max(0.0, min(100.0, float(percent)))
    except (TypeError, ValueError):
        return ""
    if state == JobState.SUCCEEDED:
        value = 100.0
    return format_html(
        '<span class="djj-progress"><progress max="100" value="{}" aria-label="{}%">'
        '</progress> <span class="djj-percent">{}%</span>{}</span>',
        f"{value:g}",
        f"{value:g}",
        f"{value:g}",
        format_html(' <span class="djj-stage" title="{}">{}</span>', stage, stage) if stage else "",
    )


def timestamp_text(value: datetime) -> str:
    """``value`` in the active time zone as the admin writes every time:
    ``"2026-12-02 14:03:05 UTC"`` (the zone's abbreviation, e.g. "CET", or its offset)."""
    local = timezone.template_localtime(value)  # type: ignore[attr-defined]  # not in the stubs
    return str(formats.date_format(local, f"{DATE_FORMAT} {TIME_FORMAT}"))


def timestamp(value: datetime | None, derived: bool = False) -> SafeString | str:
    """A timestamp as ``timestamp_text`` writes it, "-" for none, "≈" beside it when derived.

    The date and the time may wrap onto two lines (a narrow list column), never inside either.
    """
    if value is None:
        return EMPTY
    text = timestamp_text(value)
    day, clock_ = text.split(" ", 1)
    parts = format_html(
        '<span class="djj-date">{}</span> <span class="djj-clock">{}</span>', day, clock_
    )
    if not derived:
        return format_html('<span class="djj-time" title="{}">{}</span>', text, parts)
    return format_html(
        '<span class="djj-time djj-derived" title="Estimated: this row lacked timestamps its '
        'state implies; they were derived from the ones it has.">≈ {}</span>',
        parts,
    )


#: The job kinds of Django's Tasks framework (``django_jobs.tasks``): ``django.tasks`` and
#: ``django.tasks:<alias>``. Their payload names the task; each failed attempt is kept as a
#: step ``error-N`` (``django_jobs.tasks.results``), completed as a record, shown as failed.
TASKS_KIND = "django.tasks"
_TASK_ERROR_STEP = re.compile(r"^error-\d+$")


def is_task_kind(kind: str) -> bool:
    return kind == TASKS_KIND or kind.startswith(f"{TASKS_KIND}:")


def task_name(kind: str, payload: Any) -> str | None:
    """The module path of the ``@task`` function a ``django.tasks`` job runs, else None."""
    if not is_task_kind(kind):
        return None
    name = payload.get("task") if isinstance(payload, dict) else None
    return name if isinstance(name, str) and name else None


def job_label(kind: str, payload: Any) -> str:
    """What the admin calls a job: its kind, or for a ``django.tasks`` job its task's name."""
    return task_name(kind, payload) or kind


def task_error_step(kind: str, step_name: str) -> bool:
    """Is this step of a ``django.tasks`` job the record of a failed attempt?"""
    return is_task_kind(kind) and bool(_TASK_ERROR_STEP.match(step_name))


def breakable(name: str) -> SafeString:
    """A dotted name (a kind, a task's module path) that a narrow column may wrap after a dot."""
    return format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in name.split(".")))


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


def forbidden_page(request: HttpRequest, admin_site: AdminSite, what: str) -> TemplateResponse:
    """The 403 a signed-in staff user who may not see ``what`` gets: a page of the admin, which
    says so and offers to sign in as an operator (out, then back in, to the same page)."""
    login = reverse("admin:login", current_app=admin_site.name)
    context = {
        **admin_site.each_context(request),
        "title": "Operators only",
        "djj_what": what,
        "djj_login_url": f"{login}?{urlencode({'next': request.get_full_path()})}",
    }
    request.current_app = admin_site.name
    return TemplateResponse(request, "admin/django_jobs/forbidden.html", context, status=403)


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
