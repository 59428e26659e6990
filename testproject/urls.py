from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path

from . import views


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """``/favicon.ico``, which a browser asks for where a page links no icon (a JSON answer, a
    file): the icon the pages link (``admin/django_jobs/icon.html``)."""
    return HttpResponseRedirect(static("django_jobs/favicon.svg"))


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/jobs/", include("django_jobs.urls")),
    path("", views.home, name="home"),
    path("demo/jobs.json", views.jobs_json, name="demo-jobs"),
    path("demo/submit/", views.submit, name="demo-submit"),
    path("favicon.ico", favicon),
]
