"""The fleet's rows: one per running worker, one per paused queue.

Workers (``django_jobs.models.Worker``): a worker ``register``s its row as it starts (an upsert
by name, so a restarted worker of the same ``--name`` takes its row over), ``beat``s it from the
keeper thread at the heartbeat cadence (one UPDATE: ``heartbeat_at``, ``jobs_running``,
``jobs_done``, ``processes_detail``) and ``mark``s it ``stopping`` then ``stopped`` as it shuts
down. ``processes_detail`` lists the processes that run its jobs (``process_entry``): a
supervisor's worker processes, or the worker's own process with ``--processes 0``. Nothing is
written per job. ``lost`` is derived on read, never stored: a ``running`` or ``stopping`` row
whose heartbeat is older than the lease (``JOBS["LEASE"]``) reads as ``lost`` (its process
died without saying so, or its machine did). ``prune_stopped`` deletes the rows that stopped,
or were lost, more than a day ago; maintenance calls it with the job retention.

Paused queues (``django_jobs.models.PausedQueue``): a row per (engine, queue). Workers keep
the paused set of their engine in memory and pass it to the claim as queues to skip, so a claim
costs nothing more while no queue is paused. ``pause`` and ``resume`` tell the workers: on
PostgreSQL a NOTIFY (``Store.notify_paused``) makes each worker read the set again at once.
Every worker also reads it every half second (at most half the poll interval), on PostgreSQL
too: a row written without a NOTIFY (by SQL, a restore, a replica promoted) is seen as soon.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count

from ... import __version__, clock
from ...conf import jobs_settings
from ...exceptions import InvalidPayload
from ...models import Job, PausedQueue, Worker, worker_name
from ...states import WORKER_LOST, JobState, WorkerState
from ...store import get_store
from ...validation import check_label

__all__ = [
    "LOST",
    "STOPPED_KEPT",
    "beat",
    "default_name",
    "mark",
    "name_limit",
    "name_problem",
    "pause",
    "paused_queues",
    "process_entry",
    "prune_stopped",
    "queue_rows",
    "register",
    "resume",
    "worker_rows",
]

#: What a worker row reads as once its heartbeat is older than the lease (never stored).
LOST = WORKER_LOST
#: How long a stopped (or lost) worker's row is kept.
STOPPED_KEPT = timedelta(days=1)
#: Running jobs listed per worker at most (``jobs_running`` has the full count).
RUNNING_LISTED = 100


def default_name() -> str:
    """A worker's name without ``--name``: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


#: What a job's ``worker_id`` adds to the worker's name: ``:ENGINE:`` and its token, eight hex
#: digits, a dot and the process id (at most seven digits: Linux's ``pid_max`` is at most
#: 2**22), see ``engine.worker.make_worker_id``.
_TOKEN_LENGTH = 16


def name_limit(engine: str) -> int:
    """The longest name a worker of ``engine`` may have: its row's ``name`` column, and the
    ``worker_id`` (``NAME:ENGINE:TOKEN``) of every job it holds, must both hold it."""
    row = Worker._meta.get_field("name").max_length or 200
    held = Job._meta.get_field("worker_id").max_length or 200
    return min(row, held - len(engine) - 2 - _TOKEN_LENGTH)


def name_problem(name: str, engine: str = "default") -> str | None:
    """Why ``name`` cannot name a worker of ``engine`` (``runjobs --name``), in words that
    say what to pass instead; ``None`` if it can.

    Refused at start, not found later: a name longer than the columns would fail every write
    of the worker's row (a retry loop, forever), and a control character would be printed raw
    in every log line that names the worker."""
    limit = name_limit(engine)
    if len(name) > limit:
        return (
            f"--name is {len(name)} characters; a worker's name holds at most {limit} with "
            f"--engine {engine} (the worker_id its jobs record, NAME:ENGINE:TOKEN, is at most "
            "200). Pass a shorter --name, or leave it out for the default, host:pid."
        )
    try:
        check_label(name, what="--name")
    except InvalidPayload as exc:
        return f"{exc.message} Pass a name such as web-1 or {socket.gethostname()}-jobs."
    return None


def _alias(using: str | None) -> str:
    return using or jobs_settings.DATABASE


def process_entry(
    *,
    slot: int,
    pid: int,
    generation: int,
    started_at: datetime,
    rss_bytes: int,
    jobs_done: int,
    restarts: int,
    jobs: Iterable[int],
) -> dict[str, Any]:
    """One process of a worker as its row's ``processes_detail`` lists it: its slot (0 to
    ``processes - 1``), pid, generation (one more at each SIGHUP or ``--reload``), start,
    resident memory in bytes (0 until it reports it), jobs done, the restarts of its slot so
    far (a process that died and was started again), and the ids of the jobs it runs now
    (the first ``RUNNING_LISTED``)."""
    return {
        "slot": slot,
        "pid": pid,
        "generation": generation,
        "started_at": started_at.isoformat(),
        "rss_bytes": rss_bytes,
        "jobs_done": jobs_done,
        "restarts": restarts,
        "jobs": sorted(jobs)[:RUNNING_LISTED],
    }


# -- workers ------------------------------------------------------------------------------------


def register(
    name: str,
    *,
    engine: str = "default",
    queues: Iterable[str] | None = None,
    processes: int = 1,
    concurrency: int = 1,
    pid: int | None = None,
    hostname: str | None = None,
    processes_detail: list[dict[str, Any]] | None = None,
    using: str | None = None,
) -> None:
    """Write (or take over) the row of the worker ``name``, ``running`` from now."""
    now = clock.now()
    Worker.objects.using(_alias(using)).update_or_create(
        name=name,
        defaults={
            "hostname": hostname or socket.gethostname(),
            "pid": os.getpid() if pid is None else pid,
            "engine": engine,
            "queues": list(queues or []),
            "processes": processes,
            "concurrency": concurrency,
            "started_at": now,
            "heartbeat_at": now,
            "state": WorkerState.RUNNING,
            "jobs_running": 0,
            "jobs_done": 0,
            "version": __version__,
            "processes_detail": processes_detail or [],
        },
    )


def beat(
    name: str,
    *,
    jobs_running: int,
    jobs_done: int,
    state: str | None = None,
    processes_detail: list[dict[str, Any]] | None = None,
    using: str | None = None,
) -> int:
    """The heartbeat of the worker ``name``: one UPDATE of its row (with its processes, when
    given). Returns the rows written (0 when the row is gone, e.g. pruned while the worker was
    cut off: call ``register``)."""
    values: dict[str, Any] = {
        "heartbeat_at": clock.now(),
        "jobs_running": jobs_running,
        "jobs_done": jobs_done,
    }
    if state is not None:
        values["state"] = state
    if processes_detail is not None:
        values["processes_detail"] = processes_detail
    return Worker.objects.using(_alias(using)).filter(name=name).update(**values)


def mark(
    name: str,
    state: str,
    *,
    jobs_running: int | None = None,
    jobs_done: int | None = None,
    using: str | None = None,
) -> int:
    """Set the worker's state (``stopping`` as it starts to shut down, ``stopped`` once done:
    then it lists no process)."""
    if state not in WorkerState.values:
        raise ValueError(
            f"state={state!r}: a worker row is one of {', '.join(WorkerState.values)}."
        )
    values: dict[str, Any] = {"state": state, "heartbeat_at": clock.now()}
    if state == WorkerState.STOPPED:
        values["processes_detail"] = []
    if jobs_running is not None:
        values["jobs_running"] = jobs_running
    if jobs_done is not None:
        values["jobs_done"] = jobs_done
    return Worker.objects.using(_alias(using)).filter(name=name).update(**values)


def read_state(row: Worker, now: datetime, lease: timedelta | None = None) -> str:
    """The state a row reads as: its stored state, or ``lost`` for a live state whose heartbeat
    is older than the lease."""
    if row.state != WorkerState.STOPPED and row.heartbeat_at < now - (lease or jobs_settings.lease):
        return LOST
    return row.state


def prune_stopped(now: datetime | None = None, *, using: str | None = None) -> int:
    """Delete the rows of workers that stopped, or were lost, more than a day ago."""
    cutoff = (now or clock.now()) - STOPPED_KEPT
    workers = Worker.objects.using(_alias(using))
    # A lost row's heartbeat is older than the lease; a day past it, it is gone for good.
    deleted, _ = workers.filter(heartbeat_at__lt=cutoff).delete()
    return deleted


def worker_rows(now: datetime | None = None, *, using: str | None = None) -> list[dict[str, Any]]:
    """Every worker row as JSON (``jobs workers --json``, ``GET workers/``, the MCP ``workers``
    tool, the admin's Workers page), by name, with the ids of the jobs each is running."""
    alias = _alias(using)
    now = now or clock.now()
    lease = jobs_settings.lease
    rows = list(Worker.objects.using(alias).order_by("name"))
    running: dict[str, list[int]] = {}
    if any(row.state != WorkerState.STOPPED for row in rows):
        held = (
            Job.objects.using(alias)
            .order_by("id")
            .filter(state=JobState.RUNNING, worker_id__isnull=False)
            .values_list("id", "worker_id")
        )
        for job_id, worker_id in held:
            ids = running.setdefault(worker_name(worker_id) or "", [])
            if len(ids) < RUNNING_LISTED:
                ids.append(job_id)
    return [
        {
            "name": row.name,
            "hostname": row.hostname,
            "pid": row.pid,
            "engine": row.engine,
            "queues": row.queues,
            "processes": row.processes,
            "concurrency": row.concurrency,
            "started_at": row.started_at.isoformat(),
            "heartbeat_at": row.heartbeat_at.isoformat(),
            "heartbeat_age_s": round(max((now - row.heartbeat_at).total_seconds(), 0.0), 3),
            "state": read_state(row, now, lease),
            "jobs_running": row.jobs_running,
            "jobs_done": row.jobs_done,
            "running_jobs": running.get(row.name, []) if row.state != WorkerState.STOPPED else [],
            "version": row.version,
            "processes_detail": row.processes_detail if row.state != WorkerState.STOPPED else [],
        }
        for row in rows
    ]


# -- paused queues ------------------------------------------------------------------------------


def paused_pairs(engine: str | None = None, *, using: str | None = None) -> list[tuple[str, str]]:
    """The paused queues of ``engine`` (None: of every engine), as sorted ``(engine, queue)``
    pairs: one small read."""
    rows = PausedQueue.objects.using(_alias(using))
    if engine is not None:
        rows = rows.filter(engine=engine)
    return sorted(rows.values_list("engine", "queue"))


def paused_queues(engine: str = "default", *, using: str | None = None) -> frozenset[str]:
    """The queues of ``engine`` that are paused: one small read."""
    return frozenset(
        PausedQueue.objects.using(_alias(using))
        .filter(engine=engine)
        .values_list("queue", flat=True)
    )


def _paused_json(row: PausedQueue) -> dict[str, Any]:
    return {
        "queue": row.queue,
        "engine": row.engine,
        "paused": True,
        "reason": row.reason,
        "paused_at": row.paused_at.isoformat(),
        "paused_by": row.paused_by,
    }


def pause(
    queue: str,
    *,
    engine: str = "default",
    reason: str = "",
    paused_by: str = "",
    using: str | None = None,
) -> dict[str, Any]:
    """Pause ``queue`` of ``engine``: workers start none of its jobs from now on (within a
    second); running ones finish; enqueueing goes on. Pausing a paused queue updates its
    reason. Returns the queue's pause as JSON."""
    alias = _alias(using)
    with transaction.atomic(using=alias):
        row, created = PausedQueue.objects.using(alias).get_or_create(
            engine=engine,
            queue=queue,
            defaults={"reason": reason, "paused_at": clock.now(), "paused_by": paused_by},
        )
        if not created and (row.reason != reason or (paused_by and row.paused_by != paused_by)):
            row.reason = reason
            row.paused_by = paused_by or row.paused_by
            row.save(update_fields=["reason", "paused_by"])
        get_store(alias).notify_paused({engine})
    return _paused_json(row)


def resume(queue: str, *, engine: str = "default", using: str | None = None) -> bool:
    """Resume ``queue`` of ``engine``; False when it was not paused."""
    alias = _alias(using)
    with transaction.atomic(using=alias):
        deleted, _ = PausedQueue.objects.using(alias).filter(engine=engine, queue=queue).delete()
        if deleted:
            get_store(alias).notify_paused({engine})
    return bool(deleted)


def queue_rows(*, using: str | None = None) -> list[dict[str, Any]]:
    """Every queue that has jobs or a pause, per engine, with ``paused``, ``reason`` and the
    count of its jobs per state (``GET queues/``, ``jobs queues --json``)."""
    alias = _alias(using)
    queues: dict[tuple[str, str], dict[str, Any]] = {}

    def entry(engine: str, queue: str) -> dict[str, Any]:
        return queues.setdefault(
            (engine, queue),
            {
                "queue": queue,
                "engine": engine,
                "paused": False,
                "reason": "",
                "paused_at": None,
                "paused_by": "",
                "states": {},
            },
        )

    counts = (
        Job.objects.using(alias)
        .order_by()
        .values("engine", "queue", "state")
        .annotate(n=Count("id"))
    )
    for row in counts:
        entry(row["engine"], row["queue"])["states"][row["state"]] = row["n"]
    for paused in PausedQueue.objects.using(alias).all():
        entry(paused.engine, paused.queue).update(_paused_json(paused))
    return [queues[key] for key in sorted(queues)]
