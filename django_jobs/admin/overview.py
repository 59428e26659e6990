"""The queue overview (``admin/django_jobs/job/overview/``): counts per queue and state, the
oldest due job, pickup latency, throughput over the last minutes, dead letters and stuck jobs,
with pause and resume for operators."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import formats, timezone

from ..conf import jobs_settings
from ..observability.stats import expired_leases, queue_stats, throughput
from ..states import JobState
from .display import (
    EMPTY,
    STATES,
    THROUGHPUT_MINUTES,
    TOOLS_IN_CONTENT,
    duration,
    forbidden_page,
    live_context,
    milliseconds,
    timestamp,
)


class OverviewMixin:
    """The overview page and its numbers, mixed into ``JobAdmin``."""

    admin_site: Any
    opts: Any

    if TYPE_CHECKING:  # JobAdmin's, and the paused queues of FleetAdminMixin

        def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

        def has_operate_permission(self, request: HttpRequest) -> bool: ...

        def _url(self, name: str, *args: Any, query: dict[str, str] | None = None) -> str: ...

        def paused_queues(self) -> dict[str, list[dict[str, str]]]: ...

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
            "djj_charts_url": self._url("charts"),
            "djj_tools_in_content": TOOLS_IN_CONTENT,
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
