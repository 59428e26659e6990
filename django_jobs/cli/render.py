"""The human tables and pages of ``manage.py jobs``, from the JSON shapes the commands print.

Every value that comes from a job, a step, a log line, a schedule or a kind goes through
``printable``: its control characters are printed escaped (``\\x1b``), so no stored text can
move the cursor, recolour or rewrite the screen. The only raw newlines are the layout's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..printable import printable
from ..states import JobState


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain text table: left-aligned columns two spaces apart, one header line."""
    cells = [[str(h) for h in headers]] + [
        ["" if c is None else printable(c) for c in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def age(since: datetime | str | None, now: datetime, *, derived: bool = False) -> str:
    """How long ago, compactly: ``45s``, ``12m``, ``3h``, ``2d``; ``≈`` when derived."""
    if since is None:
        return "-"
    if isinstance(since, str):
        since = datetime.fromisoformat(since)
    seconds = max((now - since).total_seconds(), 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)}{unit}"
            break
    else:
        text = f"{int(seconds)}s"
    return ("≈" if derived else "") + text


def duration(seconds: float | None) -> str:
    """A length of time for humans: ``350ms``, ``12.5s``, ``3.2m``, ``1.5h``, ``2.0d``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def render_jobs(rows: Sequence[dict[str, Any]], now: datetime) -> str:
    """The ``list`` table, from job JSON."""
    if not rows:
        return "No jobs."
    return table(
        ["ID", "KIND", "QUEUE", "STATE", "ATTEMPTS", "PROGRESS", "AGE", "NOTE"],
        [
            (
                row["id"],
                row["kind"],
                row["queue"],
                row["state"],
                f"{row['attempts']}/{row['max_attempts']}",
                _percent(row["progress"]),
                age(row["created_at"], now, derived=row["timestamps_derived"]),
                _note(row),
            )
            for row in rows
        ],
    )


def render_job(detail: dict[str, Any], now: datetime) -> str:
    """The ``inspect`` page, from job JSON with ``steps`` and ``log``."""
    mark = "≈ " if detail["timestamps_derived"] else ""
    fields = [
        ("kind", detail["kind"]),
        ("state", detail["state"]),
        ("queue / engine", f"{detail['queue']} / {detail['engine']}"),
        ("attempts", f"{detail['attempts']}/{detail['max_attempts']}"),
        ("progress", _progress(detail["progress"])),
        ("priority", detail["priority"]),
        ("owner / tenant", f"{_dash(detail['owner'])} / {_dash(detail['tenant'])}"),
        ("idempotency key", detail["idempotency_key"]),
        ("created", _when(detail["created_at"], now, mark)),
        ("run at", _when(detail["run_at"], now, mark)),
        ("started", _when(detail["started_at"], now, mark)),
        ("ended", _when(detail["ended_at"], now, mark)),
    ]
    if detail.get("wait_reason"):
        fields.append(("waiting for", detail["wait_reason"]))
    if detail.get("worker"):
        pid = detail.get("worker_pid")
        where = f"worker {detail['worker']}" + (f", process {pid}" if pid else "")
        fields.append(("running on", where))
    if detail.get("error"):
        fields.append(("error", _first_line(detail["error"], 200)))
    width = max(len(name) for name, _ in fields)
    out = [f"Job #{detail['id']}"]
    out += [f"  {name.ljust(width)}  {printable(value)}" for name, value in fields]
    out += ["", "payload: " + _json_line(detail.get("payload"))]
    out += ["result:  " + _json_line(detail.get("result"))]
    out += ["", "Steps:"]
    if detail["steps"]:
        step_table = table(
            ["NAME", "STATE", "ATTEMPTS", "STARTED", "ENDED", "ERROR"],
            [
                (
                    s["name"],
                    s["state"],
                    s["attempts"],
                    _short_time(s["started_at"]),
                    _short_time(s["ended_at"]),
                    _first_line(s["error"], 60),
                )
                for s in detail["steps"]
            ],
        )
        out += ["  " + line for line in step_table.splitlines()]
    else:
        out.append("  (none)")
    out += ["", *_attempts(detail.get("attempt_history") or [])]
    out += ["", f"Log (last {len(detail['log'])} lines):" if detail["log"] else "Log: (empty)"]
    out += [f"  {printable(line)}" for line in detail["log"]]
    if detail.get("error") and "\n" in detail["error"]:
        lines = detail["error"].rstrip("\n").split("\n")
        out += ["", "Error:", *("  " + printable(line) for line in lines)]
    return "\n".join(out)


def _attempts(history: list[dict[str, Any]]) -> list[str]:
    """The ``inspect`` page's attempts: one line per run, oldest first."""
    if not history:
        return ["Attempts: (none yet)"]
    rows = table(
        ["#", "STARTED", "ENDED", "OUTCOME", "WORKER", "PID", "ERROR"],
        [
            (
                _dash(a.get("attempt")),
                _short_time(a.get("started_at")),
                _short_time(a.get("ended_at")),
                a.get("outcome"),
                _dash(a.get("worker")),
                _dash(a.get("pid")),
                _first_line(a.get("error"), 60),
            )
            for a in history
        ],
    )
    return ["Attempts:", *("  " + line for line in rows.splitlines())]


def render_tree(detail: dict[str, Any], tree: list[dict[str, Any]]) -> str:
    """The ``inspect`` page's children: one line per job, indented under its parent."""
    counts = ", ".join(
        f"{n} {state}" for state, n in detail["children"].items() if state != "total"
    )
    out = [f"Children ({detail['children']['total']}: {counts}):"]

    def walk(nodes: list[dict[str, Any]], indent: str) -> None:
        for node in nodes:
            out.append(f"{indent}#{node['id']} {printable(node['kind'])} {node['state']}")
            walk(node["children"], indent + "  ")
            if node.get("more"):
                out.append(f"{indent}… and {node['more']} more")

    walk(tree, "  ")
    return "\n".join(out)


def render_stats(stats: dict[str, Any]) -> str:
    """The ``stats`` table: one line per queue, a column per state."""
    states = list(JobState.values)
    rows = [
        (
            entry["queue"],
            *(entry["states"].get(s, 0) for s in states),
            duration(entry.get("oldest_due_age_s")),
        )
        for entry in stats["queues"]
    ]
    body = (
        table(["QUEUE", *(s.upper() for s in states), "OLDEST DUE"], rows) if rows else ("No jobs.")
    )
    latency = stats["pickup_latency_ms"]
    parts = [
        f"{q} {duration(latency[q] / 1000) if latency[q] is not None else '-'}"
        for q in ("p50", "p95", "p99")
    ]
    return f"{body}\n\nPickup latency (last {latency['sample']} started): " + ", ".join(parts)


def render_workers(rows: Sequence[dict[str, Any]]) -> str:
    """The ``workers`` table: one line per worker row; then, for the workers that list
    processes, one line per process (``processes_detail``)."""
    if not rows:
        return "No workers have a row: start one with manage.py runjobs."
    workers = table(
        [
            "NAME",
            "HOST",
            "PID",
            "ENGINE",
            "QUEUES",
            "PROCS x CONC",
            "RUNNING",
            "DONE",
            "HEARTBEAT",
            "STATE",
            "VERSION",
        ],
        [
            (
                r["name"],
                r["hostname"],
                r["pid"],
                r["engine"],
                ",".join(r["queues"]) or "*",
                f"{r['processes']} x {r['concurrency']}",
                r["jobs_running"],
                r["jobs_done"],
                f"{duration(r['heartbeat_age_s'])} ago",
                r["state"],
                r["version"],
            )
            for r in rows
        ],
    )
    processes = [
        (
            r["name"],
            p["slot"],
            p["pid"],
            p["generation"],
            _short_time(p["started_at"]),
            f"{p['rss_bytes'] / 2**20:.0f} MiB" if p["rss_bytes"] else "-",
            p["jobs_done"],
            p["restarts"],
            ",".join(map(str, p["jobs"])) or "-",
        )
        for r in rows
        for p in r.get("processes_detail") or []
    ]
    if not processes:
        return workers
    headers = ["WORKER", "SLOT", "PID", "GEN", "STARTED", "RSS", "DONE", "RESTARTS", "RUNNING"]
    return f"{workers}\n\nProcesses:\n{table(headers, processes)}"


def render_queues(rows: Sequence[dict[str, Any]]) -> str:
    """The ``queues`` table: one line per queue of an engine, paused or not, counts per state."""
    if not rows:
        return "No queues: no job was enqueued and none is paused."
    states = list(JobState.values)
    return table(
        ["ENGINE", "QUEUE", "PAUSED", *(s.upper() for s in states), "REASON"],
        [
            (
                r["engine"],
                r["queue"],
                "paused" if r["paused"] else "-",
                *(r["states"].get(s, 0) for s in states),
                r["reason"],
            )
            for r in rows
        ],
    )


def render_kinds(rows: Sequence[dict[str, Any]]) -> str:
    """The ``kinds`` manifest table."""
    if not rows:
        return "No kinds are registered (jobs are discovered from each app's jobs.py)."
    return table(
        [
            "KIND",
            "LABEL",
            "GROUP",
            "ENGINE",
            "QUEUE",
            "CONCURRENCY",
            "ATTEMPTS",
            "MEMBER SAFE",
            "SCHEDULABLE",
            "RATE",
        ],
        [
            (
                row["kind"],
                row["label"],
                row["group"] or "-",
                row["engine"],
                row["queue"],
                row["concurrency"],
                (row.get("retry") or {}).get("attempts", "-"),
                "yes" if row["member_safe"] else "no",
                "yes" if row["schedulable"] else "no",
                row.get("rate") or "-",
            )
            for row in sorted(rows, key=lambda r: r["kind"])
        ],
    )


def render_schedules(rows: Sequence[dict[str, Any]], now: datetime) -> str:
    """The ``schedules`` table, with the next occurrences."""
    if not rows:
        return "No schedules."
    return table(
        ["NAME", "WHEN", "TZ", "KIND", "STATUS", "LAST FIRED", "NEXT RUNS (UTC)"],
        [
            (
                row["name"],
                row["cron"] or f"every {row.get('every')}",
                row["tz"],
                row["kind"],
                "enabled" if row["enabled"] else "paused",
                f"{age(row['last_fired_at'], now)} ago" if row["last_fired_at"] else "never",
                ", ".join(_short_time(t) for t in row["next_runs"])
                or (f"invalid: {row['error']}" if row["error"] else "")
                or row.get("paused_reason")
                or "-",
            )
            for row in rows
        ],
    )


# --- small helpers ---------------------------------------------------------------------------


def _percent(progress: dict[str, Any] | None) -> str:
    percent = (progress or {}).get("percent")
    return "-" if percent is None else f"{percent:g}%"


def _progress(progress: dict[str, Any] | None) -> str:
    progress = progress or {}
    if progress.get("stage") is None and progress.get("percent") is None:
        return "-"
    return f"{progress.get('stage') or ''} {_percent(progress)}".strip()


def _note(row: dict[str, Any]) -> str:
    return _first_line(row.get("wait_reason") or row.get("error"), 60)


def _first_line(text: str | None, width: int) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _json_line(value: Any, width: int = 200) -> str:
    text = printable(json.dumps(value, separators=(", ", ": "), default=str))
    return text if len(text) <= width else text[: width - 1] + "…"


def _short_time(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def _when(value: str | None, now: datetime, mark: str) -> str:
    if not value:
        return "-"
    moment = datetime.fromisoformat(value)
    suffix = "ago" if moment <= now else "from now"
    distance = age(moment, now) if moment <= now else age(now, moment)
    return f"{mark}{_short_time(value)} ({distance} {suffix})"
