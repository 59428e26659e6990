"""The metrics an alert rule watches (SPEC §18): the fleet, paused queues, kills, dead letters.

Added to ``metrics_text`` (``GET metrics/``), each read at scrape time with one small query:

* ``django_jobs_workers{engine,queue}`` (gauge): live workers (running, heartbeat within the
  lease) per queue they claim from; ``queue="*"`` for a worker that claims from every queue;
* ``django_jobs_worker_heartbeat_age_seconds{worker,engine}`` (gauge): seconds since each
  worker's last heartbeat, for every worker row not stopped (a lost one's grows on);
* ``django_jobs_queue_paused{engine,queue}`` (gauge, 1) and
  ``django_jobs_queue_paused_seconds{engine,queue}`` (gauge): each paused queue, and for how
  long;
* ``django_jobs_kills_last_hour{queue,reason}`` (gauge): jobs that failed for good at their
  time limit (``reason="time_limit"``) or with their worker process (``"worker_lost"``) over
  the last hour, from the charts' rollups (closed minutes), so no job row is read;
* ``django_jobs_dead_letters{queue}`` (gauge): failed jobs per queue, those ``jobs retry``
  would bring back.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Sum

from .. import clock
from ..conf import jobs_settings
from ..models import JobRollup, PausedQueue, Worker
from ..states import JobState, WorkerState

__all__ = ["ALERTING_METRICS", "alerting_lines"]

#: Every metric name this module serves.
ALERTING_METRICS = (
    "django_jobs_workers",
    "django_jobs_worker_heartbeat_age_seconds",
    "django_jobs_queue_paused",
    "django_jobs_queue_paused_seconds",
    "django_jobs_kills_last_hour",
    "django_jobs_dead_letters",
)


def alerting_lines(stats: dict[str, Any], header: Any, sample: Any) -> list[str]:
    """The exposition lines; ``stats`` is the scrape's ``queue_stats()``, ``header`` and
    ``sample`` the endpoint's formatters."""
    alias = jobs_settings.DATABASE
    now = clock.now()
    lease = jobs_settings.lease
    lines: list[str] = []
    workers = list(
        Worker.objects.using(alias)
        .exclude(state=WorkerState.STOPPED)
        .order_by("name")
        .values_list("name", "engine", "queues", "state", "heartbeat_at")
    )
    live: dict[tuple[str, str], int] = {}
    for _, engine, queues, state, beat in workers:
        if state == WorkerState.RUNNING and now - beat <= lease:
            for queue in queues or ["*"]:
                live[engine, queue] = live.get((engine, queue), 0) + 1
    lines += header(
        "django_jobs_workers",
        "gauge",
        'Live workers (running, heartbeat within the lease) per queue; queue="*": every queue.',
    )
    for (engine, queue), n in sorted(live.items()):
        lines.append(sample("django_jobs_workers", {"engine": engine, "queue": queue}, n))
    lines += header(
        "django_jobs_worker_heartbeat_age_seconds",
        "gauge",
        "Seconds since each worker's last heartbeat (workers not stopped).",
    )
    for name, engine, _, _, beat in workers:
        age = max((now - beat).total_seconds(), 0.0)
        lines.append(
            sample("django_jobs_worker_heartbeat_age_seconds", {"worker": name, "engine": engine},
                   round(age, 3))
        )  # fmt: skip

    paused = list(PausedQueue.objects.using(alias).values_list("engine", "queue", "paused_at"))
    lines += header("django_jobs_queue_paused", "gauge", "1 for each paused queue.")
    for engine, queue, _ in paused:
        lines.append(sample("django_jobs_queue_paused", {"engine": engine, "queue": queue}, 1))
    lines += header(
        "django_jobs_queue_paused_seconds", "gauge", "Seconds since each paused queue was paused."
    )
    for engine, queue, at in paused:
        seconds = round(max((now - at).total_seconds(), 0.0), 3)
        labels = {"engine": engine, "queue": queue}
        lines.append(sample("django_jobs_queue_paused_seconds", labels, seconds))

    kills = (
        JobRollup.objects.using(alias)
        .filter(span=60, minute__gte=now - timedelta(hours=1))
        .order_by()
        .values("queue")
        .annotate(timeouts=Sum("timeouts"), lost=Sum("lost"))
    )
    lines += header(
        "django_jobs_kills_last_hour",
        "gauge",
        "Jobs failed at their time limit or with their worker process, over the last hour.",
    )
    for row in sorted(kills, key=lambda r: r["queue"]):
        for reason, n in (("time_limit", row["timeouts"]), ("worker_lost", row["lost"])):
            labels = {"queue": row["queue"], "reason": reason}
            lines.append(sample("django_jobs_kills_last_hour", labels, n or 0))

    lines += header("django_jobs_dead_letters", "gauge", "Failed jobs (dead letters) per queue.")
    for entry in stats["queues"]:
        failed = entry["states"].get(JobState.FAILED, 0)
        lines.append(sample("django_jobs_dead_letters", {"queue": entry["queue"]}, failed))
    return lines
