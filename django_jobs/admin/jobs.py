"""The job list, the job page and the queue overview."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import django
from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from .. import operations
from ..conf import jobs_settings
from ..exceptions import InvalidPayload, JobsError
from ..models import Job, JobStep
from ..observability.stats import expired_leases, queue_stats, throughput
from ..permissions import is_operator
from ..serialize import children_counts
from ..states import ENDED_STATES, RETRYABLE_STATES, JobState, StepState
from ..validation import parse_json
from .display import (
    EMPTY,
    STATES,
    THROUGHPUT_MINUTES,
    breakable,
    duration,
    forbidden_page,
    job_label,
    live_context,
    milliseconds,
    pretty_json,
    progress_bar,
    state_badge,
    task_error_step,
    task_name,
    timestamp,
)
from .filters import EngineFilter, KindFilter, LeaseFilter, QueueFilter
from .fleet import FleetAdminMixin
from .paginator import EstimatedCountPaginator


@admin.register(Job)
class JobAdmin(FleetAdminMixin, admin.ModelAdmin):
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
            {"fields": (("worker_id", "leased_until_display", "cancel_requested_display"),)},
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

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        # "#42" finds job 42, as jobs are named in messages.
        term = " ".join(b[1:] if b[:1] == "#" else b for b in search_term.split())
        return super().get_search_results(request, queryset, term)

    # -- columns and read-only fields -----------------------------------------------------------

    @admin.display(description="kind", ordering="kind")
    def kind_display(self, job: Job) -> SafeString | str:
        """The kind; for a ``django.tasks`` job, the name of its task (the kind in a tooltip)."""
        name = task_name(job.kind, job.payload)
        if name is None:
            return breakable(job.kind)
        return format_html('<span class="djj-task" title="{}">{}</span>', job.kind, breakable(name))

    @admin.display(description="kind")
    def kind_page(self, job: Job) -> SafeString | str:
        """The kind; for a ``django.tasks`` job, the name of its task, then the kind."""
        name = task_name(job.kind, job.payload)
        if name is None:
            return job.kind
        return format_html(
            '<span class="djj-task">{}</span> <span class="djj-kind-note">({})</span>',
            name,
            job.kind,
        )

    @admin.display(description="state", ordering="state")
    def state_display(self, job: Job) -> SafeString:
        return state_badge(job.state)

    @admin.display(description="progress", empty_value="")  # most jobs never report any
    def progress_display(self, job: Job) -> SafeString | str:
        return progress_bar(job.progress, job.state)

    @admin.display(description="attempts", ordering="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description="created", ordering="created_at")
    def created(self, job: Job) -> SafeString | str:
        return timestamp(job.created_at, job.timestamps_derived)

    @admin.display(description="run at", ordering="run_at")
    def run_at_display(self, job: Job) -> SafeString | str:
        return timestamp(job.run_at, job.timestamps_derived)

    # A job that waited (a sleep, an event, a gather) or was retried is started again: the row
    # keeps that last start, and its first start apart.
    @admin.display(description="first started", ordering="first_started_at")
    def first_started(self, job: Job) -> SafeString | str:
        return timestamp(job.first_started_at or job.started_at, job.timestamps_derived)

    @admin.display(description="last started", ordering="started_at")
    def started(self, job: Job) -> SafeString | str:
        return timestamp(job.started_at, job.timestamps_derived)

    @admin.display(description="ended", ordering="ended_at")
    def ended(self, job: Job) -> SafeString | str:
        return timestamp(job.ended_at, job.timestamps_derived)

    @admin.display(description="cancel requested")
    def cancel_requested_display(self, job: Job) -> str:
        # A word, not Django's boolean icon: "no" is the normal case, not a red cross.
        return "yes" if job.cancel_requested else "no"

    @admin.display(description="timestamps derived")
    def timestamps_derived_display(self, job: Job) -> str:
        return "yes (estimated)" if job.timestamps_derived else "no"

    @admin.display(description="leased until")
    def leased_until_display(self, job: Job) -> SafeString | str:
        return timestamp(job.leased_until)

    @admin.display(description="error")
    def error_display(self, job: Job) -> SafeString | str:
        return format_html('<pre class="djj-error">{}</pre>', job.error) if job.error else EMPTY

    @admin.display(description="parent")
    def parent_display(self, job: Job) -> SafeString | str:
        if job.parent_id is None:
            return EMPTY
        return format_html(
            '<a href="{}">#{}</a>', self._url("change", job.parent_id), job.parent_id
        )

    @admin.display(description="children")
    def children_display(self, job: Job) -> str:
        if not job.children_total:
            return EMPTY
        counts = children_counts([job.pk]).get(job.pk, {"total": 0})
        states = ", ".join(f"{n} {state}" for state, n in counts.items() if state != "total")
        return f"{counts['total']} ({states})"

    @admin.display(description="payload")
    def payload_display(self, job: Job) -> SafeString:
        return pretty_json(job.payload)

    @admin.display(description="result")
    def result_display(self, job: Job) -> SafeString:
        return pretty_json(job.result)

    @admin.display(description="captured state")
    def captured_display(self, job: Job) -> SafeString:
        return pretty_json(job.captured)

    # -- pages ----------------------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("overview/", wrap(self.overview_view), name=f"{prefix}_overview"),
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

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the queue overview")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Queue overview",
            "has_view_permission": True,
            **self.overview_context(),
            **live_context(),
            "djj_operator": self.has_operate_permission(request),
            "djj_workers_url": self._url("workers"),
            # Django 5.2's admin renders the object-tools block inside the content block, which
            # the overview replaces; Django 6 renders it beside the title.
            "djj_tools_in_content": django.VERSION < (6, 0),
            "djj_pause_url": self._url("pause_queue"),
            "djj_resume_url": self._url("resume_queue"),
            "djj_engines": jobs_settings.engine_names(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_jobs/job/overview.html", context)

    def overview_context(self) -> dict[str, Any]:
        """The overview's numbers: ``queue_stats()``, throughput and stuck jobs, with links."""
        stats = queue_stats()
        changelist = self._url("changelist")

        def jobs_url(**query: str) -> str:
            return self._url("changelist", query=query)

        totals = dict.fromkeys(STATES, 0)
        rows = []
        paused = self.paused_queues()
        listed = {entry["queue"] for entry in stats["queues"]}
        # A paused queue without jobs is listed too, so that it can be resumed here.
        extra: list[dict[str, Any]] = [
            {"queue": q, "states": {}, "oldest_due_age_s": None} for q in paused
        ]
        for entry in sorted(
            [*stats["queues"], *(e for e in extra if e["queue"] not in listed)],
            key=lambda e: e["queue"],
        ):
            cells = []
            for state in STATES:
                count = entry["states"].get(state, 0)
                totals[state] += count
                link = jobs_url(queue=entry["queue"], state__exact=state)
                cells.append({"state": state, "count": count, "url": link})
            rows.append(
                {
                    "queue": entry["queue"],
                    "url": jobs_url(queue=entry["queue"]),
                    "cells": cells,
                    "total": sum(entry["states"].values()),
                    "oldest_due": duration(entry["oldest_due_age_s"]),
                    "paused": paused.get(entry["queue"], []),
                }
            )
        flow = throughput(THROUGHPUT_MINUTES)
        peak = max((b["ended"] for b in flow["minutes"]), default=0)
        local = timezone.template_localtime  # type: ignore[attr-defined]  # not in the stubs
        for bucket in flow["minutes"]:
            bucket["label"] = formats.time_format(
                local(datetime.fromisoformat(bucket["minute"])), "H:i"
            )
        latency = stats["pickup_latency_ms"]
        ages = [e["oldest_due_age_s"] for e in stats["queues"] if e["oldest_due_age_s"] is not None]

        return {
            "states": STATES,
            "rows": rows,
            "totals": [
                {"state": s, "count": totals[s], "url": jobs_url(state__exact=s)} for s in STATES
            ],
            "total": sum(totals.values()),
            "oldest_due": duration(max(ages)) if ages else EMPTY,
            "latency": {
                "p50": milliseconds(latency["p50"]),
                "p95": milliseconds(latency["p95"]),
                "p99": milliseconds(latency["p99"]),
                "sample": latency["sample"],
            },
            "throughput": flow,
            "throughput_peak": max(peak, 1),
            "attention": [
                {
                    "key": JobState.FAILED,
                    "label": "Dead letters (failed)",
                    "count": totals[JobState.FAILED],
                    "url": jobs_url(state__exact=JobState.FAILED),
                },
                {
                    "key": "expired",
                    "label": "Running with an expired lease",
                    "count": expired_leases(),
                    "url": jobs_url(lease="expired"),
                },
                {
                    "key": JobState.BLOCKED,
                    "label": "Blocked",
                    "count": totals[JobState.BLOCKED],
                    "url": jobs_url(state__exact=JobState.BLOCKED),
                },
                {
                    "key": JobState.UNKNOWN,
                    "label": "Unknown (resolve a step)",
                    "count": totals[JobState.UNKNOWN],
                    "url": jobs_url(state__exact=JobState.UNKNOWN),
                },
            ],
            "changelist_url": changelist,
            "stats_at": timestamp(datetime.fromisoformat(stats["at"])),
        }

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the jobs")
        extra = {
            "djj_overview_url": self._url("overview"),
            # The list is a wide table: at 1280 px beside the app sidebar and the filters it
            # would scroll sideways. Breadcrumbs and the header lead to the other pages.
            "is_nav_sidebar_enabled": False,
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra_context=extra)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the jobs")
        return super().change_view(request, object_id, form_url, extra_context)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        if obj is not None:
            context.update(self.job_page_context(request, obj))
            # The heading and the breadcrumb say the same, from the row read for this page;
            # both are parts the live updates swap (``data-djj-live``).
            context["subtitle"] = context["djj_title"]
        return super().render_change_form(request, context, add, change, form_url, obj)

    def job_page_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        steps = list(
            JobStep.objects.using(jobs_settings.DATABASE).filter(job=job).order_by("seq", "id")
        )
        for step in steps:
            # What the template shows beside the step's own fields.
            vars(step).update(
                badge=state_badge(step.state),
                started=timestamp(step.started_at),
                ended=timestamp(step.ended_at),
            )
            if task_error_step(job.kind, step.name):
                # A Django task's failed attempt, recorded as a completed step: show it failed,
                # with the exception it raised.
                record = step.value if isinstance(step.value, dict) else {}
                vars(step).update(
                    badge=state_badge(StepState.FAILED),
                    error=str(record.get("traceback") or record.get("exception_class_path") or ""),
                )
        operator = self.has_operate_permission(request)
        children = self.children_rows(job)
        return {
            "djj_title": f"{job_label(job.kind, job.payload)}#{job.pk} ({job.state})",
            "djj_children": children,
            "djj_children_more": max(job.children_total - len(children), 0),
            "djj_overview_url": self._url("overview"),
            "djj_steps": steps,
            "djj_log": [str(line) for line in (job.log or [])],
            "djj_operator": operator,
            "djj_can_retry": operator and job.state in RETRYABLE_STATES,
            # A running job whose cancel was requested shows that instead of the button.
            "djj_cancel_requested": job.state == JobState.RUNNING and job.cancel_requested,
            "djj_can_cancel": operator
            and job.state not in ENDED_STATES
            and not (job.state == JobState.RUNNING and job.cancel_requested),
            "djj_unknown_steps": [s.name for s in steps if s.state == StepState.UNKNOWN]
            if operator
            else [],
            "djj_retry_url": self._url("retry", job.pk),
            "djj_cancel_url": self._url("cancel", job.pk),
            "djj_resolve_url": self._url("resolve", job.pk),
            **live_context(job.pk),
        }

    #: Children listed on a job page; the rest are counted (``GET {id}/children/`` pages on).
    CHILDREN_SHOWN = 100

    def children_rows(self, job: Job) -> list[dict[str, Any]]:
        if not job.children_total:
            return []
        rows = (
            Job.objects.using(jobs_settings.DATABASE)
            .filter(parent_id=job.pk)
            .order_by("id")
            .values("id", "kind", "state", "ended_at")[: self.CHILDREN_SHOWN]
        )
        return [
            {
                **row,
                "badge": state_badge(row["state"]),
                "ended": timestamp(row["ended_at"]),
                "url": self._url("change", row["id"]),
            }
            for row in rows
        ]

    # -- operator actions: POST only, CSRF-checked, through ``operations`` -----------------------

    def _operate(self, request: HttpRequest, object_id: int, act: Any) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        job = self.get_object(request, str(object_id))
        if job is None:
            raise Http404(f"No job has id {object_id}.")
        try:
            done = act(job)
        except JobsError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.log_change(request, job, done)
            self.message_user(request, done, messages.SUCCESS)
        return redirect(self._url("change", job.pk))

    def retry_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        def act(job: Job) -> str:
            from_step = request.POST.get("from_step") or None
            children = request.POST.get("children") == "on"
            row = operations.retry(job.pk, from_step=from_step, by=request.user, children=children)
            again = f" from step {from_step!r}" if from_step else ""
            if row["state"] == JobState.WAITING:
                return f"Job #{job.pk} was retried{again}: it waits for its retried children."
            return f"Job #{job.pk} was retried{again}: it is queued again."

        return self._operate(request, object_id, act)

    def cancel_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        def act(job: Job) -> str:
            state = operations.cancel(job.pk)["state"]
            if state == JobState.CANCELLED:
                return f"Job #{job.pk} was cancelled."
            return (
                f"Job #{job.pk} is running: cancel requested. Its runner sees ctx.cancelled "
                "within about a second; the job ends cancelled once it stops."
            )

        return self._operate(request, object_id, act)

    def resolve_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        def act(job: Job) -> str:
            step, as_ = request.POST.get("step", ""), request.POST.get("as", "")
            if as_ not in (StepState.COMPLETED, StepState.FAILED):
                raise JobsError('Choose how the step ended: "completed" or "failed".')
            raw = request.POST.get("value", "").strip()
            try:
                value = parse_json(raw, what=f"value of step {step!r}") if raw else None
            except InvalidPayload:
                raise  # nested too deeply, or text no database stores: its message says so
            except ValueError as exc:
                raise JobsError(
                    f'The value is not JSON ({exc}). Enter JSON, e.g. {{"id": 7}}, or leave '
                    "it empty for null."
                ) from None
            operations.resolve(job.pk, step, as_, value if as_ == StepState.COMPLETED else None)
            return f"Step {step!r} of job #{job.pk} was resolved as {as_}."

        return self._operate(request, object_id, act)

    @admin.action(description="Retry the selected jobs", permissions=["operate"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, operations.retry, "retried")

    @admin.action(description="Cancel the selected jobs", permissions=["operate"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, operations.cancel, "cancelled")  # not a state: a verb

    def _apply(self, request: HttpRequest, queryset: QuerySet[Job], op: Any, done: str) -> None:
        ok, refused = 0, []
        for pk in queryset.values_list("pk", flat=True):
            try:
                op(pk)
                ok += 1
            except JobsError as exc:
                refused.append(exc.message)
        if ok:
            self.message_user(request, f"{ok} job(s) {done}.", messages.SUCCESS)
        for message in refused:
            self.message_user(request, message, messages.WARNING)


# -- schedules ------------------------------------------------------------------------------------

#: Fields a declared schedule takes from code (``schedule(...)``); the admin shows them read-only.
