"""The job list and the job page: who may look, and what the page shows beside the row (its
attempts, steps trace, children, log tail, and the operator's buttons)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse
from django.utils.dateparse import parse_datetime

from ..attempt_history import attempt_history
from ..conf import jobs_settings
from ..models import Job, JobStep
from ..states import ENDED_STATES, RETRYABLE_STATES, JobState, StepState
from .display import (
    forbidden_page,
    job_label,
    live_context,
    state_badge,
    task_error_step,
    timestamp,
)
from .filters import searched_badly


class JobPageMixin:
    """The list's and the page's views and the page's context, mixed into ``JobAdmin`` (before
    Django's ``ModelAdmin``, whose views it extends)."""

    admin_site: Any

    if TYPE_CHECKING:  # JobAdmin's

        def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

        def has_operate_permission(self, request: HttpRequest) -> bool: ...

        def _url(self, name: str, *args: Any, query: dict[str, str] | None = None) -> str: ...

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the jobs")
        extra = {
            "djj_overview_url": self._url("overview"),
            # New and changed rows show without a reload (admin_live.js).
            "djj_live": True,
            **live_context(),
            # The list is a wide table: at 1280 px beside the app sidebar and the filters it
            # would scroll sideways. Breadcrumbs and the header lead to the other pages.
            "is_nav_sidebar_enabled": False,
            **(extra_context or {}),
        }
        response: HttpResponse = super().changelist_view(request, extra_context=extra)  # type: ignore[misc]
        if searched_badly(request):
            response.status_code = 400  # the messages name what to fix
            if getattr(response, "context_data", None) is not None:
                response.context_data["djj_live"] = False  # type: ignore[attr-defined]  # stays put
        return response

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the jobs")
        return super().change_view(request, object_id, form_url, extra_context)  # type: ignore[misc, no-any-return]

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
        return super().render_change_form(request, context, add, change, form_url, obj)  # type: ignore[misc, no-any-return]

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
        attempts = [
            {
                **entry,
                "started": timestamp(parse_datetime(entry["started_at"] or "")),
                "ended": timestamp(parse_datetime(entry["ended_at"] or "")),
            }
            for entry in attempt_history(job.attempt_history)
        ]
        return {
            "djj_title": f"{job_label(job.kind, job.payload)}#{job.pk} ({job.state})",
            "djj_children": children,
            "djj_children_more": max(job.children_total - len(children), 0),
            "djj_overview_url": self._url("overview"),
            "djj_steps": steps,
            # Each run, oldest first, as operators see it (whoever may view the page may
            # read its tracebacks, as its search does).
            "djj_attempts": attempts,
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
