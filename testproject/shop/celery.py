"""The shop's Celery app, as a Celery project writes its ``celery.py``, with ``django_jobs.celery``
imported instead of ``celery``. Imported with the app (``testproject/shop/__init__.py``) while
Django loads the installed apps, as a project's package imports its Celery app: its
``autodiscover_tasks()`` then imports ``tasks.py`` once Django is ready."""

from __future__ import annotations

from django_jobs.celery import Celery

app = Celery("shop")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
