"""Celery-shaped tasks of a small shop, run through ``django_jobs.celery`` with only the import
changed: the Celery layer's tests (tests/store/test_celery_*.py) call them."""

from __future__ import annotations

# The Celery app, loaded with the app, as Celery's Django guide loads it with the project.
from .celery import app as celery_app

__all__ = ["celery_app"]
