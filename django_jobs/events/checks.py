"""System checks for live events: ``django_jobs.E201``, ``django_jobs.W020``.

The job streams need no ``EVENTSTREAM_*`` setting (their view carries its storage and channel
rules), so none is checked; a project's own eventstream settings do not reach them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning

from ..checks import JOBS_TAG
from ..durations import parse_duration
from ..exceptions import InvalidDuration


@register(JOBS_TAG)
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


#: The URLconf whose ``events/`` streams (``path("api/jobs/", include("django_jobs.urls"))``).
JOBS_URLCONF = "django_jobs.urls"


def _routes_jobs_urls(patterns: Any, depth: int = 0) -> bool:
    """Whether ``patterns`` (a URLconf's, recursively) include ``django_jobs.urls``."""
    from django.urls import URLResolver

    for pattern in patterns:
        if not isinstance(pattern, URLResolver) or depth > 20:
            continue
        module = pattern.urlconf_name
        if getattr(module, "__name__", module) == JOBS_URLCONF:
            return True
        try:
            if _routes_jobs_urls(pattern.url_patterns, depth + 1):
                return True
        except Exception:  # a broken include: Django's own URL checks report it
            continue
    return False


@register(Tags.urls)
def check_asgi_application(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_jobs.W020``: the job API is routed but no ``ASGI_APPLICATION`` is set.

    The live events (``events/``, ``ws/jobs/``) need an ASGI server; under WSGI the stream
    answers 501. A project without ``ASGI_APPLICATION`` most likely runs ``runserver`` (WSGI)
    or a WSGI server, and would find out only when the stream refuses.
    """
    if getattr(settings, "ASGI_APPLICATION", None):
        return []
    root = getattr(settings, "ROOT_URLCONF", None)
    if not root:
        return []
    from django.urls import get_resolver

    try:
        routed = _routes_jobs_urls(get_resolver(root).url_patterns)
    except Exception:  # an URLconf that does not import: Django's own URL checks report it
        return []
    if not routed:
        return []
    return [
        CheckWarning(
            f"{JOBS_URLCONF} is routed but ASGI_APPLICATION is not set: the live events "
            "(events/, ws/jobs/) need an ASGI server, and under a WSGI server (runserver "
            "without daphne, gunicorn, uWSGI) the event stream answers 501.",
            hint="Install daphne (the `asgi` extra: pip install -e '.[asgi]' in a checkout, "
            "other forms in docs/getting-started.md#install-the-app-in-your-project; or pip "
            'install daphne), put "daphne" first in INSTALLED_APPS and set ASGI_APPLICATION = '
            '"mysite.asgi.application" (your project\'s asgi.py); in production serve that '
            "application with daphne or uvicorn.",
            id="django_jobs.W020",
        )
    ]
