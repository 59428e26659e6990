"""``GET events/`` under the API's URLs (``django_jobs.urls`` includes this)."""

from __future__ import annotations

from django.urls import path

from .sse import events

urlpatterns = [path("", events, name="events")]
