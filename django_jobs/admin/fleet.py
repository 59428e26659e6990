"""The fleet in the admin: the Workers page, and pausing or resuming a queue from the overview.

The Workers page (``admin/django_jobs/job/workers/``) lists every worker's row (host, pid,
queues, processes x concurrency, the jobs it runs with links to their pages, heartbeat age,
state, version), and under it a row per process that runs its jobs (``processes_detail``: pid,
generation, start, resident memory, jobs done, restarts, the jobs it runs now; a job's page
links to its process's row, ``#djj-process-PID``). A heartbeat is no job event, so the page
re-reads itself every second (``django_jobs/admin_live.js`` without an event stream) and swaps
in its live part.

Pause and resume are POST forms on the queue overview, for operators, CSRF-checked, through
``operations.pause_queue`` / ``resume_queue`` (the API's and the CLI's calls).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import operations
from ..conf import jobs_settings
from ..exceptions import JobsError
from ..models import PausedQueue
from ..states import JobState, WorkerState
from .display import TOOLS_IN_CONTENT, duration, forbidden_page, timestamp_text

#: Seconds between the Workers page's re-reads (heartbeat ages are to the second).
WORKERS_REFRESH_SECONDS = 1

#: The CSS class of each state a worker row reads as.
_WORKER_STATES: dict[str, str] = {
    WorkerState.RUNNING: JobState.RUNNING,
    WorkerState.STOPPING: JobState.WAITING,
    WorkerState.STOPPED: JobState.CANCELLED,
}


def memory(size: int) -> str:
    """Resident memory for people: ``84 MiB``; ``-`` before a process has said it."""
    return f"{size / 2**20:.0f} MiB" if size else "-"


def worker_badge(state: str) -> SafeString:
    """A badge for a worker's state, colored as the job states are (lost as failed)."""
    css = _WORKER_STATES.get(state, JobState.FAILED)
    return format_html('<span class="djj-badge djj-state-{}">{}</span>', css, state)


class FleetAdminMixin:
    """The Workers page and the pause/resume views, mixed into ``JobAdmin``."""

    admin_site: Any

    if TYPE_CHECKING:  # JobAdmin's

        def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

        def has_operate_permission(self, request: HttpRequest) -> bool: ...

        def _url(self, name: str, *args: Any, query: dict[str, str] | None = None) -> str: ...

    def fleet_urls(self, prefix: str) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("workers/", wrap(self.workers_view), name=f"{prefix}_workers"),
            path("queues/pause/", wrap(self.pause_queue_view), name=f"{prefix}_pause_queue"),
            path("queues/resume/", wrap(self.resume_queue_view), name=f"{prefix}_resume_queue"),
        ]

    # -- the Workers page ---------------------------------------------------------------------

    def workers_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the workers")
        opts = self.opts  # type: ignore[attr-defined]
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "title": "Workers",
            "has_view_permission": True,
            "djj_workers": self.worker_rows(),
            "djj_overview_url": self._url("overview"),
            "djj_charts_url": self._url("charts"),
            "djj_tools_in_content": TOOLS_IN_CONTENT,
            "changelist_url": self._url("changelist"),
            "djj_refresh_seconds": WORKERS_REFRESH_SECONDS,
            "djj_lease_s": jobs_settings.lease.total_seconds(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_jobs/job/workers.html", context)

    def worker_rows(self) -> list[dict[str, Any]]:
        rows = []
        for row in operations.workers():
            rows.append(
                {
                    **row,
                    "queues_text": ", ".join(row["queues"]) or "all",
                    "badge": worker_badge(row["state"]),
                    "heartbeat_age": duration(row["heartbeat_age_s"]),
                    "started": timestamp_text(datetime.fromisoformat(row["started_at"])),
                    "jobs": self._job_links(row["running_jobs"]),
                    "process_rows": [
                        {
                            **process,
                            "started": timestamp_text(
                                datetime.fromisoformat(process["started_at"])
                            ),
                            "rss": memory(process["rss_bytes"]),
                            "jobs": self._job_links(process["jobs"]),
                        }
                        for process in row["processes_detail"]
                    ],
                }
            )
        return rows

    def _job_links(self, job_ids: list[int]) -> list[dict[str, Any]]:
        return [{"id": job_id, "url": self._url("change", job_id)} for job_id in job_ids]

    # -- pausing a queue ------------------------------------------------------------------------

    def paused_queues(self) -> dict[str, list[dict[str, str]]]:
        """Queue name -> its pauses (one per engine that paused it), for the overview."""
        paused: dict[str, list[dict[str, str]]] = {}
        for row in PausedQueue.objects.using(jobs_settings.DATABASE).order_by("queue", "engine"):
            paused.setdefault(row.queue, []).append({"engine": row.engine, "reason": row.reason})
        return paused

    def pause_queue_view(self, request: HttpRequest) -> HttpResponse:
        def act(queue: str, engine: str) -> str:
            user = request.user
            operations.pause_queue(
                queue,
                engine=engine,
                reason=request.POST.get("reason", "").strip(),
                paused_by=user.get_username() if hasattr(user, "get_username") else "",
            )
            return (
                f"Queue {queue!r} ({engine}) is paused: no worker starts its jobs until it is "
                "resumed; running jobs finish, and new jobs are still accepted."
            )

        return self._queue_action(request, act)

    def resume_queue_view(self, request: HttpRequest) -> HttpResponse:
        def act(queue: str, engine: str) -> str:
            if operations.resume_queue(queue, engine=engine)["resumed"]:
                return f"Queue {queue!r} ({engine}) is resumed: workers start its jobs again."
            return f"Queue {queue!r} ({engine}) was not paused."

        return self._queue_action(request, act)

    def _queue_action(self, request: HttpRequest, act: Any) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        queue = request.POST.get("queue", "")
        engine = request.POST.get("engine", "default")
        try:
            done = act(queue, engine)
        except JobsError as exc:
            self.message_user(request, exc.message, messages.ERROR)  # type: ignore[attr-defined]
        else:
            self.message_user(request, done, messages.SUCCESS)  # type: ignore[attr-defined]
        return redirect(self._url("overview"))
