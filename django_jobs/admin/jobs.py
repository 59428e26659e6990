"""The job list, the job page and the queue overview: ``JobAdmin``.

``JobAdmin`` holds the list's configuration, who may do what, and its URLs; the rest is mixed
in by concern: ``job_columns`` (the columns and read-only fields), ``overview`` (the queue
overview), ``job_page`` (the list's and the page's views), ``job_actions`` (retry, cancel,
resolve) and ``fleet`` (the Workers page, pausing a queue).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils.http import urlencode

from ..conf import jobs_settings
from ..models import Job
from ..permissions import is_operator
from ..search import InvalidFilter, search_from_words
from .charts import ChartsMixin
from .filters import EngineFilter, KindFilter, LeaseFilter, QueueFilter, bad_search
from .fleet import FleetAdminMixin
from .job_actions import JobActionsMixin
from .job_columns import JobColumnsMixin
from .job_page import JobPageMixin
from .overview import OverviewMixin
from .paginator import EstimatedCountPaginator


@admin.register(Job)
class JobAdmin(
    JobColumnsMixin,
    OverviewMixin,
    JobPageMixin,
    JobActionsMixin,
    FleetAdminMixin,
    ChartsMixin,
    admin.ModelAdmin,
):
    list_display = (
        "id",
        "kind_display",
        "state_display",
        "progress_display",
        "queue",
        "owner",
        "attempts_display",
        "created",
        "ended",
    )
    list_display_links = ("id", "kind_display")
    # Counts per state are on the overview; facet counts over a big table are left off.
    show_facets = admin.ShowFacets.NEVER
    list_filter = ("state", QueueFilter, KindFilter, EngineFilter, LeaseFilter)
    list_select_related = ("owner",)
    ordering = ("-id",)
    show_full_result_count = False  # a filtered list counts once, not twice
    paginator = EstimatedCountPaginator  # an unfiltered list of millions is not counted
    actions = ("retry_jobs", "cancel_jobs")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("id", "kind_page"),
                    ("state_display", "progress_display"),
                    ("queue", "engine", "priority"),
                    ("owner", "tenant"),
                    ("idempotency_key", "version"),
                    ("parent_display", "children_display"),
                )
            },
        ),
        ("Attempts", {"fields": (("attempts_display", "wait_reason"), "error_display")}),
        ("Data", {"fields": ("payload_display", "result_display", "captured_display")}),
        (
            "Timestamps",
            {
                "fields": (
                    ("created", "run_at_display"),
                    ("first_started", "started", "ended"),
                    "timestamps_derived_display",
                )
            },
        ),
        (
            "Worker",
            {
                "fields": (
                    ("worker_id", "process_display"),
                    ("leased_until_display", "cancel_requested_display"),
                )
            },
        ),
    )

    class Media:
        css = {"all": ("django_jobs/admin.css",)}

    # -- permissions: operators act; Django's view permission lets other staff look ---------------

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request.user) or request.user.has_perm("django_jobs.view_job")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # No field of a job is edited by hand: a stale form saved over a running job would undo
        # the worker's writes. Operators change jobs through the actions below.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return is_operator(request.user)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).using(jobs_settings.DATABASE)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = flatten_fieldsets(self.fieldsets)
        return [*fields, *(f.name for f in self.model._meta.fields if f.name not in fields)]

    def get_search_fields(self, request: HttpRequest) -> tuple[str, ...]:
        username = get_user_model().USERNAME_FIELD
        return ("id__exact", "kind", f"owner__{username}", "idempotency_key")

    search_help_text = (
        "Ids (#42), kinds, owners and keys; and payload.user.id=42, error:timeout, "
        'error:"connection reset", worker:w1, since:1h, until:2026-12-07T08:00 '
        "(docs/admin.md)."
    )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        # The search words (payload.PATH=VALUE, error:, worker:, since:, until:) filter here;
        # the other words search ids, kinds, owners and keys. The admin shows every job to
        # whoever may view it, worker and traceback included: it searches as an operator.
        try:
            search, rest = search_from_words(search_term)
        except InvalidFilter as exc:
            bad_search(request, exc)
            return queryset.none(), False
        queryset = search.apply(queryset, operator=True)
        # "#42" finds job 42, as jobs are named in messages.
        term = " ".join(b[1:] if b[:1] == "#" else b for b in rest.split())
        return super().get_search_results(request, queryset, term)

    # -- pages ----------------------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("overview/", wrap(self.overview_view), name=f"{prefix}_overview"),
            path("charts/", wrap(self.charts_view), name=f"{prefix}_charts"),
            path("<int:object_id>/retry/", wrap(self.retry_view), name=f"{prefix}_retry"),
            path("<int:object_id>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path("<int:object_id>/resolve/", wrap(self.resolve_view), name=f"{prefix}_resolve"),
            *self.fleet_urls(prefix),
            *super().get_urls(),
        ]

    def _url(self, name: str, *args: Any, query: dict[str, str] | None = None) -> str:
        url = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}",
            args=args,
            current_app=self.admin_site.name,
        )
        return f"{url}?{urlencode(query)}" if query else url
