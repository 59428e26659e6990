"""The REST API (and the live event stream): ``path("api/jobs/", include("django_jobs.urls"))``.

Fixed paths come first: the job routes match any single path segment as an id, so a path added
here must be listed before ``router.urls``. The last pattern answers JSON 404 for any other path
under the API that ends with a slash (Django's own 404 page is HTML, and a path without the
slash still gets ``APPEND_SLASH``'s redirect).
"""

from __future__ import annotations

from django.urls import include, path, re_path
from rest_framework.routers import SimpleRouter

from .api.views import (
    JobViewSet,
    QueueViewSet,
    ScheduleViewSet,
    SchemaView,
    WorkerViewSet,
    not_found,
)
from .observability.metrics import metrics_view

app_name = "django_jobs"

router = SimpleRouter()
# Schedules before jobs: "schedules/" would otherwise be read as a job id.
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("workers", WorkerViewSet, basename="worker")
router.register("queues", QueueViewSet, basename="queue")
router.register("", JobViewSet, basename="job")

urlpatterns = [
    path("schema/", SchemaView.as_view(), name="schema"),
    path("metrics/", metrics_view, name="metrics"),
    # The Server-Sent Events stream (GET events/) is included here, before router.urls.
    path("events/", include("django_jobs.events.urls")),
    *router.urls,
    re_path(r"^.*/$", not_found),
]
