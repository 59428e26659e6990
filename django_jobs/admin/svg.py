"""Charts drawn on the server as inline SVG: no JavaScript build step, no script at all.

``chart()`` draws one chart: a title, a legend, a y axis with its unit and gridlines, a time
axis, and the series as lines (gaps where a bucket has no value) or as stacked bars. The text
and the gridlines take the admin's colours (``django_jobs/admin.css``), dark mode too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import formats, timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

__all__ = ["PALETTE", "Series", "chart", "count_text", "ms_text", "seconds_text"]

#: Colours for series by name (kinds, queues), in turn; readable on light and dark.
PALETTE = ("#2563eb", "#d97706", "#7c3aed", "#0d9488", "#db2777", "#65a30d", "#0891b2", "#6b7280")
SUCCEEDED, FAILED = "#15803d", "#b91c1c"

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 14, 28


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    color: str
    dashed: bool = False


def count_text(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def ms_text(value: float) -> str:
    if value < 1:
        return f"{value:.2g} ms"
    if value < 1000:
        return f"{value:.0f} ms"
    return seconds_text(value / 1000)


def seconds_text(value: float) -> str:
    if value < 600:
        return f"{value:.0f} s" if value >= 10 or value == int(value) else f"{value:.1f} s"
    if value < 36000:
        return f"{value / 60:.0f} min"
    if value < 86400 * 4:
        return f"{value / 3600:.0f} h"
    return f"{value / 86400:.0f} d"


#: Round steps of a time axis, in seconds: its ticks read as whole seconds, minutes or hours.
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


def _nice_ceiling(value: float, *, seconds: bool = False) -> float:
    if value <= 0:
        return 1.0
    if seconds and value > 4:
        for whole in TIME_STEPS:
            if value <= 4 * whole:
                return 4.0 * whole
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power:
            return step * power
    return 10.0 * power  # not reached


def _time_label(moment: datetime, bucket_s: int) -> str:
    local = timezone.template_localtime(moment)  # type: ignore[attr-defined]  # not in the stubs
    if bucket_s >= 3600:
        return formats.date_format(local, "D H:i")
    return formats.time_format(local, "H:i")


def chart(
    *,
    name: str,
    title: str,
    unit: str,
    times: Sequence[datetime],
    bucket_s: int,
    series: Sequence[Series],
    text: Callable[[float], str],
    bars: bool = False,
    log: bool = False,
    seconds: bool = False,
    empty: str = "Nothing in this window yet.",
) -> SafeString:
    """One chart as an ``<svg>`` with its title and legend above it (HTML)."""
    n = len(times)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if bars:
        stacked = [sum(s.values[i] or 0 for s in series) for i in range(n)]
        present = [v for v in stacked if v]
    else:
        present = [v for s in series for v in s.values if v is not None]
    parts: list[str] = []
    # The y scale: linear from 0 to a round number, or powers of ten for durations.
    if log:
        positive = [v for v in present if v > 0] or [1.0]
        low = 10 ** math.floor(math.log10(min(positive)))
        high = 10 ** math.ceil(math.log10(max(positive)))
        if high <= low:
            high = low * 10
        span = math.log10(high) - math.log10(low)

        def y(v: float) -> float:
            v = max(v, low)
            return TOP + plot_h * (1 - (math.log10(v) - math.log10(low)) / span)

        ticks = [low * 10**i for i in range(round(span) + 1)]
        if len(ticks) > 6:
            ticks = ticks[:: math.ceil(len(ticks) / 6)]
    else:
        top = _nice_ceiling(max(present, default=0.0), seconds=seconds)

        def y(v: float) -> float:
            return TOP + plot_h * (1 - v / top)

        ticks = [top * i / 4 for i in range(5)]
    for tick in ticks:
        ty = y(tick)
        parts.append(
            f'<line class="djj-grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty:.1f}" '
            f'y2="{ty:.1f}"/><text class="djj-axis" x="{LEFT - 6}" y="{ty + 4:.1f}" '
            f'text-anchor="end">{escape(text(tick))}</text>'
        )
    parts.append(
        f'<text class="djj-axis djj-unit" x="12" y="{TOP + plot_h / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {TOP + plot_h / 2:.0f})">{escape(unit)}</text>'
    )
    slot = plot_w / max(n, 1)

    def x(i: int) -> float:
        return LEFT + slot * (i + 0.5)

    # The time axis: about six labels, at whole buckets.
    every = max(1, math.ceil(n / 6))
    for i in range(0, n, every):
        parts.append(
            f'<text class="djj-axis" x="{x(i):.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
            f"{escape(_time_label(times[i], bucket_s))}</text>"
        )
    parts.append(
        f'<line class="djj-baseline" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" '
        f'y2="{TOP + plot_h}"/>'
    )
    if bars:
        width = max(slot * 0.8, 1.0)
        for i in range(n):
            base = 0.0
            for s in series:
                v = s.values[i] or 0
                if not v:
                    continue
                y0, y1 = y(base), y(base + v)
                parts.append(
                    f'<rect x="{x(i) - width / 2:.1f}" y="{y1:.1f}" width="{width:.1f}" '
                    f'height="{max(y0 - y1, 0.5):.1f}" fill="{s.color}">'
                    f"<title>{escape(_time_label(times[i], bucket_s))} {escape(s.name)}: "
                    f"{escape(count_text(v))}</title></rect>"
                )
                base += v
    else:
        for s in series:
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            run: list[str] = []
            runs: list[list[str]] = []
            for i, value in enumerate(s.values):
                if value is None:
                    if run:
                        runs.append(run)
                    run = []
                    continue
                run.append(f"{x(i):.1f},{y(value):.1f}")
            if run:
                runs.append(run)
            for points in runs:
                if len(points) == 1:
                    cx, cy = points[0].split(",")
                    parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{s.color}"/>')
                else:
                    parts.append(
                        f'<polyline fill="none" stroke="{s.color}" stroke-width="2"{dash} '
                        f'points="{" ".join(points)}"/>'
                    )
    if not present:
        parts.append(
            f'<text class="djj-axis" x="{LEFT + plot_w / 2:.0f}" y="{TOP + plot_h / 2:.0f}" '
            f'text-anchor="middle">{escape(empty)}</text>'
        )
    legend = "".join(
        format_html(
            '<li><span class="djj-swatch{}" style="border-color: {}"></span>{}</li>',
            " djj-dashed" if s.dashed else "",
            s.color,
            s.name,
        )
        for s in series
    )
    svg = (
        f'<svg class="djj-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" data-chart="{escape(name)}" data-buckets="{n}" '
        f'data-values="{len(present)}" preserveAspectRatio="xMidYMid meet">'
        f"<title>{escape(title)}</title>{''.join(parts)}</svg>"
    )
    return format_html(
        '<figure class="djj-figure" id="djj-chart-{}"><figcaption><h3>{}</h3>'
        '<ul class="djj-legend">{}</ul></figcaption>{}</figure>',
        name,
        title,
        mark_safe(legend),  # built by format_html above
        mark_safe(svg),  # every text in it escaped above
    )
