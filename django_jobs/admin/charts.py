"""The Charts page (``admin/django_jobs/job/charts/``): the rollups over 1 h, 24 h or 7 d.

Jobs succeeded and failed per bucket, runtime p50/p95 per kind, pickup latency, and each
queue's depth and oldest queued job's age, filtered by queue and kind: the series of
``GET charts/`` (``observability.charts.chart_series``) drawn as SVG on the server
(``admin.svg``). Live as the overview is: each job event re-reads the page and swaps the charts
in (``django_jobs/admin_live.js``), so a minute shows as soon as a worker closed it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.safestring import SafeString

from ..observability.charts import WINDOWS, InvalidChart, chart_series
from ..states import JobState
from .display import TOOLS_IN_CONTENT, forbidden_page, live_context
from .svg import FAILED, PALETTE, SUCCEEDED, Series, chart, count_text, ms_text, seconds_text

#: The most kinds drawn on the runtime chart (the busiest); the kind filter shows any other.
MOST_KINDS = 8

_PER = {60: "per minute", 900: "per 15 minutes", 3600: "per hour"}


class ChartsMixin:
    """The Charts page, mixed into ``JobAdmin``."""

    admin_site: Any
    opts: Any

    if TYPE_CHECKING:  # JobAdmin's

        def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

        def _url(self, name: str, *args: Any, query: dict[str, str] | None = None) -> str: ...

        def message_user(self, request: HttpRequest, message: str, level: int) -> None: ...

    def charts_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            return forbidden_page(request, self.admin_site, "the charts")
        window = request.GET.get("window", "1h")
        queue = request.GET.get("queue") or None
        kind = request.GET.get("kind") or None
        try:
            data = chart_series(window, queue=queue, kind=kind)
        except InvalidChart as exc:
            self.message_user(request, f"{exc.message} Showing every job of the last hour.",
                              messages.WARNING)  # fmt: skip
            window, queue, kind = "1h", None, None
            data = chart_series(window)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Charts",
            "has_view_permission": True,
            **live_context(),
            "djj_overview_url": self._url("overview"),
            "djj_workers_url": self._url("workers"),
            "djj_tools_in_content": TOOLS_IN_CONTENT,
            "changelist_url": self._url("changelist"),
            "djj_window": window,
            "djj_queue": queue or "",
            "djj_kind": kind or "",
            "djj_windows": [
                {
                    "name": name,
                    "label": name.replace("h", " h").replace("d", " d"),
                    "url": "?" + urlencode({"window": name, **_filters(queue, kind)}),
                    "current": name == window,
                }
                for name in WINDOWS
            ],
            "djj_choices": data["choices"],
            "djj_charts": self.charts(data),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_jobs/job/charts.html", context)

    def charts(self, data: dict[str, Any]) -> list[SafeString]:
        times = [datetime.fromisoformat(t) for t in data["buckets"]]
        step = data["bucket_s"]
        per = _PER.get(step, f"per {step} s")
        common = {"times": times, "bucket_s": step}
        jobs = data["jobs"]
        kinds = sorted(
            data["runtime_ms"],
            key=lambda k: -sum(1 for v in data["runtime_ms"][k]["p50"] if v is not None),
        )[:MOST_KINDS]
        runtime = []
        for i, name in enumerate(sorted(kinds)):
            color = PALETTE[i % len(PALETTE)]
            runtime.append(Series(f"{name} p50", data["runtime_ms"][name]["p50"], color))
            runtime.append(Series(f"{name} p95", data["runtime_ms"][name]["p95"], color, True))
        pickup = data["pickup_ms"]
        queues = data["queues"]
        colors = {q: PALETTE[i % len(PALETTE)] for i, q in enumerate(queues)}
        return [
            chart(
                name="jobs",
                title=f"Jobs ended {per}",
                unit=f"jobs {per}",
                series=[
                    Series(JobState.SUCCEEDED, jobs[JobState.SUCCEEDED], SUCCEEDED),
                    Series(JobState.FAILED, jobs[JobState.FAILED], FAILED),
                ],
                text=count_text,
                bars=True,
                **common,
            ),
            chart(
                name="runtime",
                title="Runtime per kind (p50 solid, p95 dashed)",
                unit="runtime (log)",
                series=runtime,
                text=ms_text,
                log=True,
                **common,
            ),
            chart(
                name="pickup",
                title="Pickup latency: due to started, first attempts",
                unit="latency (log)",
                series=[
                    Series("p50", pickup["p50"], PALETTE[0]),
                    Series("p95", pickup["p95"], PALETTE[0], True),
                ],
                text=ms_text,
                log=True,
                **common,
            ),
            chart(
                name="depth",
                title="Queue depth (jobs queued)",
                unit="jobs queued",
                series=[Series(q, queues[q]["depth"], colors[q]) for q in queues],
                text=count_text,
                **common,
            ),
            chart(
                name="oldest",
                title="Oldest queued job's wait, per queue",
                unit="wait",
                series=[Series(q, queues[q]["oldest_age_s"], colors[q]) for q in queues],
                text=seconds_text,
                seconds=True,
                **common,
            ),
        ]


def _filters(queue: str | None, kind: str | None) -> dict[str, str]:
    return {k: v for k, v in (("queue", queue), ("kind", kind)) if v}
