"""What operators do to jobs in the admin: retry, cancel and resolve from a job's page, retry
and cancel from the list. POST only, CSRF-checked, through ``django_jobs.operations`` (the API's
and the CLI's calls), never by saving the row."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect

from .. import operations
from ..exceptions import InvalidPayload, JobsError
from ..models import Job
from ..states import JobState, StepState
from ..validation import parse_json


class JobActionsMixin:
    """The job page's retry, cancel and resolve views and the list's actions (``actions``),
    mixed into ``JobAdmin``."""

    if TYPE_CHECKING:  # JobAdmin's, and its ModelAdmin's

        def get_object(
            self, request: HttpRequest, object_id: str, from_field: str | None = None
        ) -> Job | None: ...

        def message_user(
            self,
            request: HttpRequest,
            message: Any,
            level: int | str = ...,
            extra_tags: str = ...,
            fail_silently: bool = ...,
        ) -> None: ...

        def log_change(self, request: HttpRequest, obj: Job, message: Any) -> Any: ...

        def has_operate_permission(self, request: HttpRequest) -> bool: ...

        def _url(self, name: str, *args: Any, query: dict[str, str] | None = None) -> str: ...

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
