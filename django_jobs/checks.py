"""System checks for the JOBS settings: mistakes show at ``manage.py check``, not at first use."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import connections
from django.utils.module_loading import import_string

from .clock import TEST_CLOCK_ENV, test_clock_file
from .conf import DEFAULTS
from .durations import parse_duration, parse_rate
from .exceptions import InvalidDuration

#: The tag of django_jobs' own checks (``manage.py check --tag django_jobs``). A tag, so that
#: its commands can run them with the other checks they need (``COMMAND_CHECK_TAGS``):
#: Django runs an untagged check only when every check runs.
JOBS_TAG = "django_jobs"

#: The checks ``manage.py runjobs`` and ``manage.py jobs`` run as they start: django_jobs'
#: own, and Django's that concern a process serving no URL (models, caches, signals, ...).
#: Left out: those of the web process (URLs, templates, static files, the admin, deploy
#: security); the URL checks load the project's URLconf and every view in it. Measured: a
#: worker that ran every check started in 1.5 s, about 0.3 s of CPU of it the URL checks
#: (the job API's views, the event stream's HTTP libraries). ``manage.py check`` runs them all.
COMMAND_CHECK_TAGS = [
    JOBS_TAG,
    Tags.models,
    Tags.compatibility,
    Tags.async_support,
    Tags.caches,
    Tags.files,
    Tags.signals,
    Tags.translation,
]


@register(JOBS_TAG)
def check_jobs_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    value = getattr(settings, "JOBS", {})
    if value is None:
        value = {}
    if not isinstance(value, dict):
        return [
            Error(
                "JOBS must be a dict.",
                hint="Write JOBS = {...} in settings.",
                id="django_jobs.E001",
            )
        ]
    errors: list[CheckMessage] = []
    unknown = sorted(set(value) - set(DEFAULTS))
    if unknown:
        errors.append(
            Error(
                f"Unknown JOBS keys: {', '.join(unknown)}.",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="django_jobs.E001",
            )
        )
    alias = value.get("DATABASE", "default")
    if alias not in settings.DATABASES:
        errors.append(
            Error(
                f'JOBS["DATABASE"] = {alias!r} is not in DATABASES.',
                hint=f"Use one of: {', '.join(settings.DATABASES)}.",
                id="django_jobs.E002",
            )
        )
    elif connections[alias].vendor not in ("postgresql", "sqlite"):
        errors.append(
            Error(
                f'JOBS["DATABASE"] = {alias!r} is {connections[alias].vendor}; django_jobs needs '
                "PostgreSQL or SQLite.",
                hint="Point JOBS['DATABASE'] at a PostgreSQL or SQLite alias.",
                id="django_jobs.E002",
            )
        )
    if value.get("OUTBOX", "auto") not in ("auto", "required"):
        errors.append(
            Error(
                f'JOBS["OUTBOX"] = {value["OUTBOX"]!r} is not "auto" or "required".',
                id="django_jobs.E003",
            )
        )
    for key in ("LEASE", "SCHEDULE_GRACE", "POLL_INTERVAL", "RETENTION", "KILL_GRACE"):
        if value.get(key) is None:
            continue
        try:
            parse_duration(value[key], name=f'JOBS["{key}"]')
        except InvalidDuration as exc:
            errors.append(Error(exc.message, id="django_jobs.E004"))
    for key in ("IS_OPERATOR", "TENANT_OF"):
        target = value.get(key)
        if target is None or callable(target):
            continue
        try:
            obj = import_string(target)
        except ImportError as exc:
            errors.append(
                Error(
                    f'JOBS["{key}"] = {target!r} cannot be imported ({exc}).',
                    hint="Give the dotted path of a callable(user).",
                    id="django_jobs.E005",
                )
            )
            continue
        if not callable(obj):
            errors.append(
                Error(f'JOBS["{key}"] = {target!r} is not callable.', id="django_jobs.E005")
            )
    errors += _check_engines(value.get("ENGINES", DEFAULTS["ENGINES"]))
    errors += _check_caps(value.get("CAPS", DEFAULTS["CAPS"]))
    rates = value.get("RATES") or {}
    if not isinstance(rates, dict):
        errors.append(
            Error(
                'JOBS["RATES"] must map queue names to rates like "100/m".', id="django_jobs.E009"
            )
        )
    else:
        for queue, rate in rates.items():
            try:
                parse_rate(rate)
            except ValueError as exc:
                errors.append(Error(f'JOBS["RATES"][{queue!r}]: {exc}', id="django_jobs.E009"))
    for key in ("MEMBER_RATE", "AUTH_FAILURE_RATE"):
        if value.get(key) is None:
            continue
        try:
            parse_rate(value[key])
        except ValueError as exc:
            errors.append(
                Error(
                    f'JOBS["{key}"]: {exc}',
                    hint="Or None: no throttle (docs/security.md).",
                    id="django_jobs.E009",
                )
            )
    owned = value.get("MEMBER_SCHEDULES", DEFAULTS["MEMBER_SCHEDULES"])
    if owned is not None and not (_positive_int(owned) or owned == 0):
        errors.append(
            Error(
                f'JOBS["MEMBER_SCHEDULES"] = {owned!r} must be a whole number >= 0 (0: members '
                "add none), or None (no limit).",
                id="django_jobs.E012",
            )
        )
    streams = value.get("MAX_STREAMS_PER_USER", DEFAULTS["MAX_STREAMS_PER_USER"])
    if streams is not None and not _positive_int(streams):
        errors.append(
            Error(
                f'JOBS["MAX_STREAMS_PER_USER"] = {streams!r} must be a whole number >= 1, or '
                "None (no limit).",
                id="django_jobs.E012",
            )
        )
    errors += _check_tracing(value)
    tail = value.get("LOG_TAIL", 100)
    if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
        errors.append(
            Error(f'JOBS["LOG_TAIL"] = {tail!r} must be an integer >= 0.', id="django_jobs.E008")
        )
    return errors


#: ``JOBS["TRACE_RELATIONSHIP"]``'s values (``engine.tracing``, docs/observability.md).
TRACE_RELATIONSHIPS = ("child_first_attempt", "child", "link")


def _check_tracing(value: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    relationship = value.get("TRACE_RELATIONSHIP", DEFAULTS["TRACE_RELATIONSHIP"])
    if relationship not in TRACE_RELATIONSHIPS:
        errors.append(
            Error(
                f'JOBS["TRACE_RELATIONSHIP"] = {relationship!r} is not one of '
                f"{', '.join(repr(r) for r in TRACE_RELATIONSHIPS)}.",
                hint='Use "child_first_attempt" (the default), "child" or "link" '
                "(docs/observability.md).",
                id="django_jobs.E301",
            )
        )
    provider = value.get("TRACER_PROVIDER")
    if isinstance(provider, str):
        try:
            import_string(provider)
        except ImportError as exc:
            errors.append(
                Error(
                    f'JOBS["TRACER_PROVIDER"] = {provider!r} cannot be imported ({exc}).',
                    hint="Give the dotted path of a TracerProvider, or None for "
                    "OpenTelemetry's global one.",
                    id="django_jobs.E302",
                )
            )
    elif provider is not None and not hasattr(provider, "get_tracer"):
        errors.append(
            Error(
                f'JOBS["TRACER_PROVIDER"] = {provider!r} is not a TracerProvider (it has no '
                "get_tracer).",
                hint="Give an opentelemetry TracerProvider, its dotted path, or None.",
                id="django_jobs.E302",
            )
        )
    return errors


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_engines(engines: Any) -> list[CheckMessage]:
    if not isinstance(engines, dict) or not engines:
        return [
            Error(
                'JOBS["ENGINES"] must be a non-empty dict of name -> {"concurrency": N}.',
                id="django_jobs.E006",
            )
        ]
    errors: list[CheckMessage] = []
    for name, config in engines.items():
        concurrency = (config or {}).get("concurrency", 1) if isinstance(config, dict) else None
        if not _positive_int(concurrency):
            errors.append(
                Error(
                    f'JOBS["ENGINES"][{name!r}]["concurrency"] = {concurrency!r} must be an '
                    "integer >= 1.",
                    id="django_jobs.E006",
                )
            )
    return errors


def _check_caps(caps: Any) -> list[CheckMessage]:
    if not isinstance(caps, dict):
        return [
            Error(
                'JOBS["CAPS"] must be a dict with "global", "queues" and "tenant".',
                id="django_jobs.E007",
            )
        ]
    errors: list[CheckMessage] = []
    for key in ("global", "tenant"):
        cap = caps.get(key)
        if cap is not None and not _positive_int(cap):
            errors.append(
                Error(
                    f'JOBS["CAPS"][{key!r}] = {cap!r} must be None or an integer >= 1.',
                    id="django_jobs.E007",
                )
            )
    queues = caps.get("queues") or {}
    if not isinstance(queues, dict) or not all(
        v is None or _positive_int(v) for v in queues.values()
    ):
        errors.append(
            Error(
                'JOBS["CAPS"]["queues"] must map queue names to integers >= 1.',
                id="django_jobs.E007",
            )
        )
    return errors


# Public SECRET_KEY values: this project's demo/test key (in its repository), and Django's
# ``startproject`` placeholder prefix. Anyone who knows the key can forge session cookies (and
# so sign in as an operator) and every other signature.
KNOWN_INSECURE_SECRET_KEYS = frozenset({"django-jobs-demo-not-secret"})
INSECURE_SECRET_KEY_PREFIX = "django-insecure-"


def _is_known_insecure(key: Any) -> bool:
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    return isinstance(key, str) and (
        key in KNOWN_INSECURE_SECRET_KEYS or key.startswith(INSECURE_SECRET_KEY_PREFIX)
    )


@register(Tags.security, deploy=True)
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A known, public ``SECRET_KEY`` with ``DEBUG`` off: ``django_jobs.W010``, under
    ``check --deploy`` as Django's own security checks are.

    Job owners and operators are told apart by the session, which the key signs: with a public
    key, anyone can make themselves an operator. Django's ``security.W009`` warns about a short
    or ``django-insecure-`` key; this one also knows the demo's key and looks at
    ``SECRET_KEY_FALLBACKS``. It is a deploy check, not an error of every command: Django's test
    runner turns ``DEBUG`` off, and a new project's ``manage.py test`` must run with the key
    ``startproject`` wrote. With ``DEBUG`` on (local work, the demo) it says nothing.
    """
    if settings.DEBUG:
        return []
    names = []
    if _is_known_insecure(getattr(settings, "SECRET_KEY", None)):
        names.append("SECRET_KEY")
    if any(_is_known_insecure(k) for k in getattr(settings, "SECRET_KEY_FALLBACKS", None) or []):
        names.append("SECRET_KEY_FALLBACKS")
    if not names:
        return []
    return [
        CheckWarning(
            f"{' and '.join(names)} holds a publicly known key (the django_jobs demo's, or one "
            f"starting with {INSECURE_SECRET_KEY_PREFIX!r} from startproject) while DEBUG is off: "
            "anyone could sign session cookies and act as an operator.",
            hint="Set a new, secret SECRET_KEY (e.g. from the environment; make one with "
            "django.core.management.utils.get_random_secret_key()) and drop the public one "
            "from SECRET_KEY_FALLBACKS; or turn DEBUG on for local use.",
            id="django_jobs.W010",
        )
    ]


@register(JOBS_TAG)
def check_test_clock(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The file-driven clock of ``clock.py`` is a testing hook: refused with ``DEBUG`` off."""
    path = test_clock_file()
    if path is None or settings.DEBUG:
        return []
    return [
        Error(
            f"{TEST_CLOCK_ENV}={path!r} is set while DEBUG is off: the engine's clock would be "
            "read from that file instead of the system clock.",
            hint=f"Unset {TEST_CLOCK_ENV}; it is for tests that drive worker processes.",
            id="django_jobs.E011",
        )
    ]
