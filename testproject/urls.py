from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/jobs/", include("django_jobs.urls")),
    path("", views.home, name="home"),
    path("demo/jobs.json", views.jobs_json, name="demo-jobs"),
    path("demo/submit/", views.submit, name="demo-submit"),
]
