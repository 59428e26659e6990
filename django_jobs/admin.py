"""The admin is for operators: jobs are read-only rows, acted on through ``operations``.

Nobody adds a job here (jobs are admitted by code or the API) and no field of a job is edited
here, payload included (the change form is a read-only view); only operators
(``django_jobs.operate_jobs`` or ``JOBS["IS_OPERATOR"]``) see jobs, and only they may retry or
cancel them, with the list's actions.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from . import operations
from .exceptions import JobsError
from .models import Job
from .permissions_util import is_operator


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "state", "queue", "owner", "attempts", "created_at", "ended_at")
    list_filter = ("state", "queue", "kind")
    search_fields = ("kind", "idempotency_key")
    ordering = ("-id",)
    actions = ("retry_jobs", "cancel_jobs")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_operator(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_operator(request.user)

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
