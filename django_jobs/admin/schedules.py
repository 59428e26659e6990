"""Schedules: a form that checks cron or every, time zone, kind, payload and the enqueue
options; pause and resume."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from .. import clock
from ..conf import jobs_settings
from ..durations import format_duration
from ..engine import schedules
from ..exceptions import InvalidPayload, InvalidSchedule, JobsError
from ..kinds.registry import get
from ..models import Schedule
from ..permissions import is_operator
from .display import EMPTY, forbidden_page, timestamp

#: A declared schedule's fields, read-only here (its code declares them): all the service
#: edits but whether it runs and whose it is.
DECLARED_FIELDS = tuple(f for f in schedules.EDITABLE if f not in ("enabled", "owner"))


class ScheduleDurationField(forms.CharField):
    """A duration typed as text ("20s", "5m", "1h"), shown the same way; empty: none."""

    def prepare_value(self, value: Any) -> Any:
        return format_duration(value) if isinstance(value, timedelta) else value

    def to_python(self, value: Any) -> Any:
        value = super().to_python(value)
        return value or None


class ScheduleForm(forms.ModelForm):
    """Each field is judged by the schedule service's check (``engine.schedules``), the one
    the API and ``schedule(...)`` use."""

    catch_up = forms.ChoiceField(choices=[(c, c) for c in schedules.CATCH_UP_CHOICES])
    every = ScheduleDurationField(
        required=False,
        help_text='Or an interval of at least 1 s instead of cron, e.g. "20s" or "5m": '
        "occurrences at its whole multiples from the Unix epoch, in UTC.",
    )
    expires = ScheduleDurationField(
        required=False,
        help_text="A fired job not started this long after its occurrence ends cancelled "
        '("expired"), e.g. "10m". Empty: never.',
    )

    class Meta:
        model = Schedule
        fields = schedules.EDITABLE  # what the schedule service takes and may change
        help_texts = {
            "cron": '5 cron fields, e.g. "0 3 * * *", 6 with the second last '
            '("0 3 * * * 30" is 03:00:30), or a macro such as "@daily". Empty with every.',
            "tz": 'The IANA time zone the cron times are read in, e.g. "Europe/Paris" '
            '("UTC" for an interval).',
            "owner": "Jobs this schedule fires are owned by this user (optional).",
            "queue": "The queue of each fired job; empty: the kind's own.",
            "priority": "The priority of each fired job (lower runs first); empty: the kind's.",
        }

    def _checked(self, check: Any, field: str) -> Any:
        try:
            return check(self.cleaned_data[field])
        except JobsError as exc:
            raise ValidationError(exc.message) from None

    def clean_name(self) -> str:
        return self._checked(schedules.check_name, "name")

    def clean_cron(self) -> str:
        if not self.cleaned_data.get("cron"):
            return ""
        return self._checked(schedules.check_cron, "cron")

    def clean_every(self) -> Any:
        return self._checked(schedules.check_every, "every")

    def clean_expires(self) -> Any:
        return self._checked(schedules.check_expires, "expires")

    def clean_queue(self) -> Any:
        return self._checked(schedules.check_queue, "queue")

    def clean_tz(self) -> str:
        return self._checked(schedules.check_tz, "tz")

    def clean_kind(self) -> str:
        return self._checked(schedules.schedulable, "kind").kind

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if "cron" in data and "every" in data:
            try:
                schedules.check_timing(data["cron"], data["every"])
            except InvalidSchedule as exc:
                self.add_error(exc.field or "cron", exc.message)
        handle = get(data.get("kind") or "")
        if handle is not None and "payload" in data:
            try:
                schedules.check_payload(handle, data["payload"])
            except InvalidPayload as exc:
                self.add_error("payload", exc.message)
        return data


def _fill(obj: Schedule, row: Schedule) -> None:
    """Copy a row the service saved onto the admin's object (the admin goes on with it)."""
    for field in Schedule._meta.concrete_fields:
        setattr(obj, field.attname, getattr(row, field.attname))
    obj._state.adding, obj._state.db = False, row._state.db


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "timing",
        "tz",
        "kind",
        "enabled",
        "next_run",
        "last_fired",
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
        "next_run",
        "last_fired",
        "checked",
        "created",
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

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the schedules")
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return super().get_queryset(request).using(jobs_settings.DATABASE)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is not None and obj.declared:
            return (*DECLARED_FIELDS, *self.readonly_fields)
        return self.readonly_fields

    @admin.display(description="when", ordering="cron")
    def timing(self, schedule: Schedule) -> str:
        return schedule.timing

    @admin.display(description="next runs")
    def upcoming(self, schedule: Schedule) -> SafeString | str:
        if not schedule.enabled or not schedule.pk:
            return EMPTY
        try:
            runs = schedules.upcoming(schedule, clock.now(), 5)
        except InvalidSchedule as exc:
            return exc.message
        return format_html_join("", "<div>{}</div>", ((timestamp(run),) for run in runs))

    # Dates as the job pages write them (``display.timestamp``): one format, with the time zone.

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, schedule: Schedule) -> SafeString | str:
        return timestamp(schedule.next_run_at)

    @admin.display(description="last fired", ordering="last_fired_at")
    def last_fired(self, schedule: Schedule) -> SafeString | str:
        return timestamp(schedule.last_fired_at)

    @admin.display(description="checked until")
    def checked(self, schedule: Schedule) -> SafeString | str:
        return timestamp(schedule.checked_until)

    @admin.display(description="created")
    def created(self, schedule: Schedule) -> SafeString | str:
        return timestamp(schedule.created_at)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        # The form checked every field with the service's checks; the service checks them
        # again and owns the write (next run, catch-up watermark, pause reason).
        if not change:
            _fill(obj, schedules.create(**{f: form.cleaned_data[f] for f in schedules.EDITABLE}))
            return
        current = self.get_queryset(request).get(pk=obj.pk)
        changes = {f: form.cleaned_data[f] for f in form.changed_data}
        _fill(obj, schedules.update(current, changes))

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        schedules.delete(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        kept = schedules.delete_many(queryset)
        if kept:
            self.message_user(
                request,
                f"Declared schedules are kept: {', '.join(kept)}. They come from code; remove "
                "the schedule(...) call to retire one, or pause it here.",
                messages.WARNING,
            )

    @admin.action(description="Pause the selected schedules", permissions=["operate"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = schedules.pause_many(queryset)
        self.message_user(request, f"{count} schedule(s) paused.", messages.SUCCESS)

    @admin.action(description="Resume the selected schedules", permissions=["operate"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = 0
        for schedule in queryset.filter(enabled=False):
            try:
                schedules.resume(schedule)
            except JobsError as exc:
                self.message_user(request, f"{schedule.name}: {exc.message}", messages.ERROR)
                continue
            count += 1
        self.message_user(request, f"{count} schedule(s) resumed.", messages.SUCCESS)
