"""``manage.py jobs drain``: run due jobs in this process, with a heartbeat like a worker's."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from .. import clock
from ..conf import jobs_settings
from ..engine.maintenance import end_expired_jobs
from ..engine.rows.publish import publish
from ..engine.run.executor import Executor
from ..engine.run.runner import run_next
from ..engine.worker.worker import make_worker_id
from ..models import Job
from ..store import get_store
from . import BadInput

logger = logging.getLogger("django_jobs.cli")


def drain(
    *,
    limit: int = 32,
    queues: Sequence[str] | None = None,
    engine: str | None = None,
    progress: Callable[[int, Job], None] | None = None,
) -> list[Job]:
    """Run up to ``limit`` due jobs in this process, one at a time; return them as they ended.

    The same steps as ``django_jobs.testing.run_until_idle`` (``engine.runner.run_next``: claim
    one within the caps and rates, execute, record, publish), under a worker id of its own and
    with a heartbeat: a long job keeps its lease, so a worker running beside the drain never
    takes it for a crashed one, and a cancel reaches it.
    ``progress(n, job)`` is called after each run. A retry that falls due at once runs again
    within the limit, so a job can appear more than once.
    """
    if limit < 1:
        raise BadInput(f"--limit must be at least 1, not {limit}.")
    if engine is not None and engine not in jobs_settings.engine_names():
        raise BadInput(
            f"Unknown engine {engine!r}; JOBS['ENGINES'] defines: "
            f"{', '.join(jobs_settings.engine_names())}."
        )
    store = get_store()
    end_expired_jobs()  # as a worker does: a job whose expires_at passed ends, unrun
    executor = Executor(make_worker_id("drain"), inline=True)
    ran: list[Job] = []
    with _Heartbeat(store, executor.worker_id, jobs_settings.lease) as heartbeat:
        while len(ran) < limit:
            job = run_next(
                store,
                executor,
                engine=engine,
                queues=list(queues) if queues else None,
                watch=heartbeat.watch,
            )
            if job is None:
                break
            ran.append(job)
            if progress is not None:
                progress(len(ran), job)
    return ran


class _Heartbeat:
    """A thread that extends the lease of the job being drained and flushes its live output.

    It beats every third of the lease, like a worker's keeper; a job shorter than that never
    sees it touch the database.
    """

    def __init__(self, store: Any, worker_id: str, lease: timedelta) -> None:
        self.store, self.worker_id, self.lease = store, worker_id, lease
        self.every = max(lease.total_seconds() / 3, 0.2)
        self.lock = threading.Lock()
        self.current: tuple[Job, Any] | None = None
        self.since = 0.0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="jobs-drain-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=self.every + 5)

    def watch(self, job: Job | None, live: Any) -> None:
        with self.lock:
            self.current = (job, live) if job is not None else None
            self.since = time.monotonic()

    def _run(self) -> None:
        from django.db import DatabaseError, connections

        try:
            while not self.stopped.wait(self.every):
                with self.lock:
                    current, since = self.current, self.since
                if current is None or time.monotonic() - since < self.every:
                    continue
                job, live = current
                try:
                    flags = self.store.heartbeat(self.worker_id, clock.now() + self.lease)
                    if flags.get(job.pk):
                        live.cancel_requested = True
                    taken = live.take()
                    if taken is not None:
                        progress, log, new_lines, progress_changed = taken
                        self.store.save_live(job.pk, self.worker_id, progress, log)
                        job.progress, job.log = progress, log
                        for line in new_lines:
                            publish("job.log", job, line=line)
                        if progress_changed:
                            publish("job.progress", job)
                except DatabaseError:
                    logger.warning("drain: heartbeat of job #%s failed", job.pk, exc_info=True)
        finally:
            connections.close_all()
