"""The admin is for operators: the queue at a glance, jobs as read-only rows, and schedules.

Pages (see docs/admin.md):

- **Queue overview** (``admin/django_jobs/job/overview/``): counts per queue and state, the
  oldest due job, pickup latency, throughput over the last minutes, dead letters and stuck jobs.
- **Jobs**: a read-only list (state badges, progress bars, "≈" beside derived timestamps) and
  a read-only job page (payload, result, the steps trace, the log tail) with retry, cancel and
  resolve buttons for operators. Both pages follow live events when the event stream is
  installed (``django_jobs.urls``), else they reload every few seconds.
- **Schedules**: cron and time zone are checked in the form; pause and resume are actions.

Nobody adds a job here (jobs are admitted by code or the API) and no field of a job is edited
here, payload included: operators act through ``django_jobs.operations``, the same calls as the
API and the CLI, never by saving the row. Operators (``django_jobs.operate_jobs`` or
``JOBS["IS_OPERATOR"]``) see and act on everything; a staff user granted Django's *view*
permission on jobs or schedules may look, read-only, and is refused every action.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils import formats, timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from . import clock, operations
from .conf import jobs_settings
from .engine import cron as cron_rules
from .events.payloads import EVENT_TYPES
from .exceptions import InvalidPayload, InvalidSchedule, JobsError
from .models import Job, JobStep, Schedule
from .paginator import EstimatedCountPaginator
from .permissions_util import is_operator
from .registry import all_handles, get
from .stats import expired_leases, queue_stats, throughput
from .types import ENDED_STATES, RETRYABLE_STATES, JobState

#: Job states in the order the overview shows them.
STATES: tuple[str, ...] = tuple(JobState.values)
#: Payloads and results longer than this (as pretty JSON) are cut on the job page.
JSON_DISPLAY_LIMIT = 100_000
#: How many minutes the overview's throughput covers.
THROUGHPUT_MINUTES = 10
#: How often a page without the live event stream reloads itself, in seconds.
REFRESH_SECONDS = 5
EMPTY = "-"
#: Timestamps on the list and the job page: sortable, to the second.
TIMESTAMP_FORMAT = "Y-m-d H:i:s"


# -- display helpers: HTML fragments shared by the list, the job page and the overview ------------


def state_badge(state: str) -> SafeString:
    """A colored badge for a job or step state (CSS in ``django_jobs/admin.css``)."""
    return format_html('<span class="djj-badge djj-state-{}">{}</span>', state, state)


def progress_bar(progress: dict[str, Any] | None) -> SafeString | str:
    """A progress bar from ``progress.percent`` with the stage beside it; "-" without one."""
    progress = progress or {}
    percent, stage = progress.get("percent"), progress.get("stage")
    if percent is None:
        return format_html('<span class="djj-stage">{}</span>', stage) if stage else EMPTY
    try:
        value = max(0.0, min(100.0, float(percent)))
    except (TypeError, ValueError):
        return EMPTY
    return format_html(
        '<span class="djj-progress"><progress max="100" value="{}" aria-label="{}%">'
        '</progress> <span class="djj-percent">{}%</span>{}</span>',
        f"{value:g}",
        f"{value:g}",
        f"{value:g}",
        format_html(' <span class="djj-stage" title="{}">{}</span>', stage, stage) if stage else "",
    )


def timestamp(value: datetime | None, derived: bool = False) -> SafeString | str:
    """A timestamp to the second, in the current time zone; "≈" beside it when derived."""
    if value is None:
        return EMPTY
    text = formats.date_format(timezone.template_localtime(value), TIMESTAMP_FORMAT)
    if not derived:
        return format_html('<span class="djj-time">{}</span>', text)
    return format_html(
        '<span class="djj-time djj-derived" title="Estimated: this row lacked timestamps its '
        'state implies; they were derived from the ones it has.">≈ {}</span>',
        text,
    )


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, ensure_ascii=False, cls=DjangoJSONEncoder)
    if len(text) > JSON_DISPLAY_LIMIT:
        text = text[:JSON_DISPLAY_LIMIT] + "\n… (cut here; `manage.py jobs inspect` shows it all)"
    return format_html('<pre class="djj-json">{}</pre>', text)


def duration(seconds: float | None) -> str:
    """``95.2`` -> ``"1m 35s"``; ``None`` -> ``"-"``."""
    if seconds is None:
        return EMPTY
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def milliseconds(value: float | None) -> str:
    if value is None:
        return EMPTY
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def events_url() -> str | None:
    """The live event stream's URL, or None when the project does not route it."""
    try:
        return reverse("django_jobs:events")
    except NoReverseMatch:
        return None


def live_context(job_id: int | None = None) -> dict[str, Any]:
    """What the pages' live-update script needs (see ``django_jobs/admin_live.js``)."""
    return {
        "djj_events_url": events_url(),
        "djj_event_types": json.dumps(list(EVENT_TYPES)),
        "djj_live_job": job_id,
        "djj_refresh_seconds": REFRESH_SECONDS,
    }


# -- jobs -----------------------------------------------------------------------------------------


class _DeclaredValuesFilter(admin.SimpleListFilter):
    """Filter on values the code declares (no ``SELECT DISTINCT`` over the whole table)."""

    field = ""

    def declared(self) -> set[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = self.declared() | ({self.value()} if self.value() else set())
        return [(v, v) for v in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(**{self.field: self.value()}) if self.value() else queryset


class QueueFilter(_DeclaredValuesFilter):
    title = parameter_name = field = "queue"

    def declared(self) -> set[str]:
        caps = (jobs_settings.CAPS or {}).get("queues") or {}
        return {h.queue for h in all_handles()} | set(caps) | set(jobs_settings.RATES or {})


class KindFilter(_DeclaredValuesFilter):
    title = parameter_name = field = "kind"

    def declared(self) -> set[str]:
        return {h.kind for h in all_handles()}


class EngineFilter(_DeclaredValuesFilter):
    title = parameter_name = field = "engine"

    def declared(self) -> set[str]:
        return set(jobs_settings.engine_names()) | {h.engine for h in all_handles()}


class LeaseFilter(admin.SimpleListFilter):
    """Running jobs whose worker stopped heartbeating (their lease ran out)."""

    title = "lease"
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("expired", "Expired (stuck running)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() == "expired":
            return queryset.filter(state="running", leased_until__lt=clock.now())
        return queryset


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "kind",
        "state_display",
        "progress_display",
        "queue",
        "owner",
        "attempts_display",
        "created",
        "ended",
    )
    list_display_links = ("id", "kind")
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
                    ("id", "kind"),
                    ("state_display", "progress_display"),
                    ("queue", "engine", "priority"),
                    ("owner", "tenant"),
                    ("idempotency_key", "version"),
                )
            },
        ),
        ("Attempts", {"fields": (("attempts_display", "wait_reason"), "error_display")}),
        ("Data", {"fields": ("payload_display", "result_display", "captured_display")}),
        (
            "Timestamps",
            {"fields": (("created", "run_at_display"), ("started", "ended"), "timestamps_derived")},
        ),
        ("Worker", {"fields": (("worker_id", "leased_until", "cancel_requested"),)}),
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

    @admin.display(description="state", ordering="state")
    def state_display(self, job: Job) -> SafeString:
        return state_badge(job.state)

    @admin.display(description="progress")
    def progress_display(self, job: Job) -> SafeString | str:
        return progress_bar(job.progress)

    @admin.display(description="attempts", ordering="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description="created", ordering="created_at")
    def created(self, job: Job) -> SafeString | str:
        return timestamp(job.created_at, job.timestamps_derived)

    @admin.display(description="run at", ordering="run_at")
    def run_at_display(self, job: Job) -> SafeString | str:
        return timestamp(job.run_at, job.timestamps_derived)

    @admin.display(description="started", ordering="started_at")
    def started(self, job: Job) -> SafeString | str:
        return timestamp(job.started_at, job.timestamps_derived)

    @admin.display(description="ended", ordering="ended_at")
    def ended(self, job: Job) -> SafeString | str:
        return timestamp(job.ended_at, job.timestamps_derived)

    @admin.display(description="error")
    def error_display(self, job: Job) -> SafeString | str:
        return format_html('<pre class="djj-error">{}</pre>', job.error) if job.error else EMPTY

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
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Queue overview",
            "has_view_permission": True,
            **self.overview_context(),
            **live_context(),
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
        for entry in stats["queues"]:
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
                }
            )
        flow = throughput(THROUGHPUT_MINUTES)
        peak = max((b["ended"] for b in flow["minutes"]), default=0)
        for bucket in flow["minutes"]:
            bucket["label"] = formats.time_format(
                timezone.template_localtime(datetime.fromisoformat(bucket["minute"])), "H:i"
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
                    "key": "failed",
                    "label": "Dead letters (failed)",
                    "count": totals["failed"],
                    "url": jobs_url(state__exact="failed"),
                },
                {
                    "key": "expired",
                    "label": "Running with an expired lease",
                    "count": expired_leases(),
                    "url": jobs_url(lease="expired"),
                },
                {
                    "key": "blocked",
                    "label": "Blocked",
                    "count": totals["blocked"],
                    "url": jobs_url(state__exact="blocked"),
                },
                {
                    "key": "unknown",
                    "label": "Unknown (resolve a step)",
                    "count": totals["unknown"],
                    "url": jobs_url(state__exact="unknown"),
                },
            ],
            "changelist_url": changelist,
            "stats_at": timestamp(datetime.fromisoformat(stats["at"])),
        }

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra = {"djj_overview_url": self._url("overview"), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

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
        return super().render_change_form(request, context, add, change, form_url, obj)

    def job_page_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        steps = list(
            JobStep.objects.using(jobs_settings.DATABASE).filter(job=job).order_by("seq", "id")
        )
        for step in steps:
            step.badge = state_badge(step.state)
            step.started = timestamp(step.started_at)
            step.ended = timestamp(step.ended_at)
        operator = self.has_operate_permission(request)
        return {
            "djj_overview_url": self._url("overview"),
            "djj_steps": steps,
            "djj_log": [str(line) for line in (job.log or [])],
            "djj_operator": operator,
            "djj_can_retry": operator and job.state in RETRYABLE_STATES,
            "djj_can_cancel": operator and job.state not in ENDED_STATES,
            "djj_unknown_steps": [s.name for s in steps if s.state == "unknown"]
            if operator
            else [],
            "djj_retry_url": self._url("retry", job.pk),
            "djj_cancel_url": self._url("cancel", job.pk),
            "djj_resolve_url": self._url("resolve", job.pk),
            **live_context(job.pk),
        }

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
            operations.retry(job.pk, from_step=from_step)
            again = f" from step {from_step!r}" if from_step else ""
            return f"Job #{job.pk} was retried{again}: it is queued again."

        return self._operate(request, object_id, act)

    def cancel_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        def act(job: Job) -> str:
            state = operations.cancel(job.pk)["state"]
            if state == "cancelled":
                return f"Job #{job.pk} was cancelled."
            return f"Job #{job.pk} is running: its runner was asked to stop (ctx.cancelled)."

        return self._operate(request, object_id, act)

    def resolve_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        def act(job: Job) -> str:
            step, as_ = request.POST.get("step", ""), request.POST.get("as", "")
            if as_ not in ("completed", "failed"):
                raise JobsError('Choose how the step ended: "completed" or "failed".')
            raw = request.POST.get("value", "").strip()
            try:
                value = json.loads(raw) if raw else None
            except ValueError as exc:
                raise JobsError(
                    f'The value is not JSON ({exc}). Enter JSON, e.g. {{"id": 7}}, or leave '
                    "it empty for null."
                ) from None
            operations.resolve(job.pk, step, as_, value if as_ == "completed" else None)
            return f"Step {step!r} of job #{job.pk} was resolved as {as_}."

        return self._operate(request, object_id, act)

    @admin.action(description="Retry the selected jobs", permissions=["operate"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, operations.retry, "retried")

    @admin.action(description="Cancel the selected jobs", permissions=["operate"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, operations.cancel, "cancelled")

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
DECLARED_FIELDS = ("name", "cron", "tz", "kind", "payload", "catch_up")


class ScheduleForm(forms.ModelForm):
    catch_up = forms.ChoiceField(choices=[(c, c) for c in cron_rules.CATCH_UP_CHOICES])

    class Meta:
        model = Schedule
        fields = ("name", "cron", "tz", "kind", "payload", "catch_up", "enabled", "owner")
        help_texts = {
            "cron": '5 cron fields, e.g. "0 3 * * *", or a macro such as "@daily".',
            "tz": 'The IANA time zone the cron times are read in, e.g. "Europe/Paris".',
            "owner": "Jobs this schedule fires are owned by this user (optional).",
        }

    def clean_cron(self) -> str:
        try:
            return cron_rules.validate_cron(self.cleaned_data["cron"])
        except InvalidSchedule as exc:
            raise ValidationError(exc.message) from None

    def clean_tz(self) -> str:
        try:
            cron_rules.validate_tz(self.cleaned_data["tz"])
        except InvalidSchedule as exc:
            raise ValidationError(exc.message) from None
        return self.cleaned_data["tz"]

    def clean_kind(self) -> str:
        kind = self.cleaned_data["kind"]
        if get(kind) is None:
            known = ", ".join(sorted(h.kind for h in all_handles())[:20]) or "none"
            raise ValidationError(
                f"No job kind {kind!r} is registered; pick one the code defines ({known})."
            )
        return kind

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        handle = get(data.get("kind") or "")
        if handle is not None and "payload" in data:
            try:
                handle.validate_payload(data["payload"])
            except InvalidPayload as exc:
                self.add_error("payload", exc.message)
        return data


def _next_run(schedule: Schedule, now: datetime) -> datetime | None:
    if not schedule.enabled:
        return None
    runs = cron_rules.next_runs(schedule.cron, schedule.tz, now, 1)
    return runs[0] if runs else None


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "cron",
        "tz",
        "kind",
        "enabled",
        "next_run_at",
        "last_fired_at",
        "declared",
    )
    list_filter = ("enabled", "declared")
    search_fields = ("name", "kind")
    raw_id_fields = ("owner",)
    actions = ("pause_schedules", "resume_schedules", "delete_selected")
    readonly_fields = (
        "declared",
        "upcoming",
        "next_run_at",
        "last_fired_at",
        "checked_until",
        "created_at",
    )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request.user) or request.user.has_perm("django_jobs.view_schedule")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_operator(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A declared schedule comes back at the next sync: remove it from the code instead.
        return is_operator(request.user) and not (obj is not None and obj.declared)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return is_operator(request.user)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return super().get_queryset(request).using(jobs_settings.DATABASE)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is not None and obj.declared:
            return (*DECLARED_FIELDS, *self.readonly_fields)
        return self.readonly_fields

    @admin.display(description="next runs")
    def upcoming(self, schedule: Schedule) -> SafeString | str:
        if not schedule.enabled or not schedule.pk:
            return EMPTY
        try:
            runs = cron_rules.next_runs(schedule.cron, schedule.tz, clock.now(), 5)
        except InvalidSchedule as exc:
            return exc.message
        return format_html_join(
            "", "<div>{}</div>", ((formats.localize(timezone.template_localtime(r)),) for r in runs)
        )

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        alias = jobs_settings.DATABASE
        now = clock.now()
        if not change:
            # Occurrences count from now on: a new schedule never fires for the past.
            obj.synced_at = obj.checked_until = now
            obj.next_run_at = _next_run(obj, now)
            obj.save(using=alias)
            return
        changed = set(form.changed_data)
        if {"cron", "tz", "enabled"} & changed:
            obj.next_run_at = _next_run(obj, now)
            changed.add("next_run_at")
            if obj.enabled:
                # A resumed or re-timed schedule fires from now on: the pause, or the old
                # timing, is not "missed" for catch_up.
                obj.checked_until = now
                changed.add("checked_until")
        if changed:
            # Only the fields changed here: the scheduler writes the others concurrently.
            obj.save(using=alias, update_fields=sorted(changed))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        declared = list(queryset.filter(declared=True).values_list("name", flat=True))
        if declared:
            self.message_user(
                request,
                f"Declared schedules are kept: {', '.join(declared)}. They come from code; remove "
                "the schedule(...) call to retire one, or pause it here.",
                messages.WARNING,
            )
        super().delete_queryset(request, queryset.filter(declared=False))

    @admin.action(description="Pause the selected schedules", permissions=["operate"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = queryset.filter(enabled=True).update(enabled=False, next_run_at=None)
        self.message_user(request, f"{count} schedule(s) paused.", messages.SUCCESS)

    @admin.action(description="Resume the selected schedules", permissions=["operate"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        now, count = clock.now(), 0
        for schedule in queryset.filter(enabled=False):
            schedule.enabled, schedule.checked_until = True, now
            try:
                schedule.next_run_at = _next_run(schedule, now)
            except InvalidSchedule as exc:
                self.message_user(request, f"{schedule.name}: {exc.message}", messages.ERROR)
                continue
            schedule.save(
                using=jobs_settings.DATABASE,
                update_fields=["enabled", "checked_until", "next_run_at"],
            )
            count += 1
        self.message_user(request, f"{count} schedule(s) resumed.", messages.SUCCESS)
