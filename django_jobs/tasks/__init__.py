"""Django's Tasks framework on django_jobs.

``TASKS = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend"}}`` runs ``@task`` functions
(``django.tasks`` on Django 6, the ``django-tasks`` backport on Django 5.2) as jobs. Names are
imported lazily so that importing this package never requires the Tasks framework.
"""

from __future__ import annotations

from typing import Any

from .registration import register_task_backends

__all__ = ["KIND", "JobsBackend", "kind_for", "register_task_backends"]


def __getattr__(name: str) -> Any:
    if name in ("JobsBackend", "KIND", "kind_for"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'django_jobs.tasks' has no attribute {name!r}")
