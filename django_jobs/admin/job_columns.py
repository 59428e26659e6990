"""The job list's columns and the job page's read-only fields, as ``JobAdmin`` shows them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import Job, worker_name, worker_pid
from ..serialize import children_counts
from ..states import JobState
from .display import (
    EMPTY,
    breakable,
    pretty_json,
    progress_bar,
    state_badge,
    task_name,
    timestamp,
)


class JobColumnsMixin:
    """Each column of the job list and read-only field of the job page (``list_display``,
    ``fieldsets``), mixed into ``JobAdmin``."""

    if TYPE_CHECKING:  # JobAdmin's

        def _url(self, name: str, *args: Any, query: dict[str, str] | None = None) -> str: ...

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

    @admin.display(description="process")
    def process_display(self, job: Job) -> SafeString | str:
        """The process running the job: its pid, linked to its row on the Workers page, and
        its worker's name (from the ``worker_id`` the claim wrote)."""
        pid = worker_pid(job.worker_id) if job.state == JobState.RUNNING else None
        if pid is None:
            return EMPTY
        return format_html(
            '<a href="{}#djj-process-{}" data-worker-pid="{}">process {}</a> of worker {}',
            self._url("workers"),
            pid,
            pid,
            pid,
            worker_name(job.worker_id),
        )

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
