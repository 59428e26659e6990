"""The JOBS settings dict, read lazily and reloaded on ``setting_changed``.

Modelled on DRF's ``api_settings``: nothing is read at import time, so tests may override JOBS.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .durations import parse_duration

DEFAULTS: dict[str, Any] = {
    "ENGINES": {"default": {"concurrency": 1}},
    "DATABASE": "default",
    "OUTBOX": "auto",
    "LEASE": "30s",
    # Added to a kind's timeout (the soft limit) for its hard limit when @job names no
    # time_limit: past it, a worker process running the job is ended (engine.supervisor).
    "KILL_GRACE": "10s",
    "LOG_TAIL": 100,
    "IS_OPERATOR": None,
    "TENANT_OF": None,
    # The retry policy (a ``Retry``) of every kind whose @job names none. None: ``Retry()``,
    # 3 attempts (read by ``kinds.handle.default_retry``: this module is below the engine's Retry).
    "DEFAULT_RETRY": None,
    "CAPS": {"global": None, "queues": {}, "tenant": None},
    "RATES": {},
    "SCHEDULE_GRACE": "60s",
    "POLL_INTERVAL": "1s",
    "PREFETCH": 64,
    "MAX_PAYLOAD_BYTES": 256 * 1024,
    "MAX_PAGE_BYTES": 8 * 1024 * 1024,  # about the most one API list page answers
    "RETENTION": None,
    "EVENT_RETENTION": "1d",  # live event rows (django_jobs.events): replay window
    # Members' throttles (docs/security.md): submits and schedule creations, one budget per
    # member, counted in the database so that it holds across web processes.
    "MEMBER_RATE": "60/m",
    "MAX_STREAMS_PER_USER": 8,  # open SSE streams and WebSockets per member, per web process
    "AUTH_FAILURE_RATE": "10/m",  # refused credentials per client address
    "MEMBER_SCHEDULES": 20,  # schedules one member may own (operators: no limit)
    # Tracing (docs/observability.md): how an attempt's span relates to its enqueue's, and the
    # TracerProvider to use (an object or an import string; None: OpenTelemetry's global one).
    "TRACE_RELATIONSHIP": "child_first_attempt",
    "TRACER_PROVIDER": None,
}


class JobsSettings:
    """Attribute access to JOBS with defaults; import strings resolved on use."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        value = getattr(settings, "JOBS", None) or {}
        return value if isinstance(value, dict) else {}

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Invalid JOBS setting: {name!r}")
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, DEFAULTS[name])
        return self._cache[name]

    def reload(self) -> None:
        self._cache.clear()

    # -- derived values ----------------------------------------------------------------------

    @property
    def default_retry(self) -> Any:
        """``JOBS["DEFAULT_RETRY"]`` as set (None: ``Retry()``), for ``kinds.handle.default_retry``:
        read for every job enqueued, so from the cache without ``__getattr__``'s detour (a
        failed attribute lookup first, three times the cost)."""
        cache = self._cache
        if "DEFAULT_RETRY" in cache:
            return cache["DEFAULT_RETRY"]
        return self.DEFAULT_RETRY

    @property
    def lease(self) -> timedelta:
        return parse_duration(self.LEASE, name='JOBS["LEASE"]')

    @property
    def kill_grace(self) -> timedelta:
        return parse_duration(self.KILL_GRACE, name='JOBS["KILL_GRACE"]')

    @property
    def poll_interval(self) -> float:
        return parse_duration(self.POLL_INTERVAL, name='JOBS["POLL_INTERVAL"]').total_seconds()

    @property
    def schedule_grace(self) -> timedelta:
        return parse_duration(self.SCHEDULE_GRACE, name='JOBS["SCHEDULE_GRACE"]')

    def engine_concurrency(self, engine: str) -> int:
        engines = self.ENGINES or {}
        config = engines.get(engine) or {}
        return int(config.get("concurrency", 1))

    def engine_names(self) -> list[str]:
        return list((self.ENGINES or {"default": {}}).keys())

    def callable_setting(self, name: str) -> Any:
        value = getattr(self, name)
        if value is None or callable(value):
            return value
        return import_string(value)


jobs_settings = JobsSettings()


def reload_jobs_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "JOBS":
        jobs_settings.reload()
