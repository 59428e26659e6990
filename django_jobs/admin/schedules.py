"""Schedules: a form that checks cron, time zone, kind and payload; pause and resume."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import formats, timezone
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from .. import clock
from ..conf import jobs_settings
from ..engine import cron as cron_rules
from ..exceptions import InvalidPayload, InvalidSchedule
from ..models import Schedule
from ..permissions import is_operator
from ..registry import all_handles, get
from .display import EMPTY

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
        super().clean()
        data = self.cleaned_data
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
        "paused_reason",
    )
    list_filter = ("enabled", "declared")
    search_fields = ("name", "kind")
    raw_id_fields = ("owner",)
    actions = ("pause_schedules", "resume_schedules", "delete_selected")
    readonly_fields = (
        "paused_reason",
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
        local = timezone.template_localtime  # type: ignore[attr-defined]  # not in the stubs
        return format_html_join("", "<div>{}</div>", ((formats.localize(local(r)),) for r in runs))

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
                if obj.paused_reason:
                    obj.paused_reason = None
                    changed.add("paused_reason")
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
            schedule.enabled, schedule.checked_until, schedule.paused_reason = True, now, None
            try:
                schedule.next_run_at = _next_run(schedule, now)
            except InvalidSchedule as exc:
                self.message_user(request, f"{schedule.name}: {exc.message}", messages.ERROR)
                continue
            schedule.save(
                using=jobs_settings.DATABASE,
                update_fields=["enabled", "checked_until", "next_run_at", "paused_reason"],
            )
            count += 1
        self.message_user(request, f"{count} schedule(s) resumed.", messages.SUCCESS)
