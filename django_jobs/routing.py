"""WebSocket routes: ``URLRouter(django_jobs.routing.websocket_urlpatterns)`` in the ASGI app."""

from __future__ import annotations

from django.urls import path

from .events.ws import JobEventsConsumer

websocket_urlpatterns = [path("ws/jobs/", JobEventsConsumer.as_asgi(), name="jobs-events")]
