from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("api/jobs/", include("django_jobs.urls")),  # REST API and live events
]
