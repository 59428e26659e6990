"""Registering the job kinds of the ``TASKS`` backends at start-up.

A worker (``manage.py runjobs``) must know the ``django.tasks`` kinds before it runs their
jobs, yet Django builds task backends lazily. ``JobsConfig.ready()`` calls
``register_task_backends()`` so every process has them. This module imports nothing of the
Tasks framework unless ``TASKS`` names a backend, so projects without it are unaffected.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string


def register_task_backends() -> list[str]:
    """Register the kind of every ``TASKS`` alias whose backend is a ``JobsBackend``."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, dict):
        return []
    kinds: list[str] = []
    for alias, params in configured.items():
        if not isinstance(params, dict):
            continue
        try:
            cls = import_string(str(params.get("BACKEND", "")))
            # Only now: tasks.backend imports the Tasks framework, which a project without
            # TASKS may not have (see the module).
            from .backend import JobsBackend
        except ImportError:
            continue  # Django reports a backend it cannot import (its own system check)
        if isinstance(cls, type) and issubclass(cls, JobsBackend):
            backend = cls(alias=alias, params=params)
            if backend.config_error is None:
                kinds.append(backend.kind)
    return kinds
