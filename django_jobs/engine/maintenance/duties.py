"""Maintenance of the queue: retention deletes ended jobs (and steps) past a cutoff, in batches.

Only ended jobs are ever deleted: ``succeeded``, ``failed`` and ``cancelled``. A live job
(queued, running, waiting, blocked, unknown) is never touched, whatever its timestamps say.
A job's age is its ``ended_at``; a row that lacks it (imported, or written by an older schema)
is aged by the latest timestamp it has, as the normalized read derives it (SPEC §4), and a row
with no timestamp at all is kept.

Each batch is one short transaction: lock up to ``batch_size`` old ended rows (``Store.lock_jobs``,
which passes over rows a concurrent ``retry()`` holds where the store ``supports_skip_locked``),
then delete them with their steps and count them in the pruned tally (``Store.prune_jobs``: one
statement on PostgreSQL), without loading them. When another model has a foreign key to
``Job``, or a ``pre_delete``/``post_delete`` receiver listens, the batch goes through Django's
deletion collector instead, which honours them.

``JOBS["RETENTION"]`` (a duration such as ``"30d"``, or None to keep everything) is applied by
``prune_expired(now)``, which a worker calls periodically; ``manage.py jobs prune`` does the same
by hand.

Expiry: ``end_expired_jobs`` ends the queued jobs that never started and whose ``expires_at``
(``expires=``) has passed: ``cancelled`` with the error "expired", one ``job.cancelled`` event
each. The claim itself never starts such a job; this only makes the end visible. Every worker
calls it periodically; ``run_until_idle`` and ``manage.py jobs drain`` before they run.

The charts' rollups (``JobRollup``) of the minutes before the cutoff go with the jobs
(``prune_rollups``).

Workers: ``prune_workers`` deletes the rows of workers that stopped (or were lost) more than a
day ago (``engine.fleet``); workers call it with the retention, once a minute.

Rescue: ``rescue_stale`` re-asks the jobs whose worker stopped heartbeating past its lease;
every worker calls it periodically for its engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.db.models.signals import post_delete, pre_delete

from ... import clock
from ...conf import jobs_settings
from ...durations import Duration, parse_duration
from ...models import Job, JobRollup, JobStep
from ...states import ENDED_STATES
from ...store import Store, get_store
from ..observe.tracing import expired as traced_expiry
from ..rows.fleet import prune_stopped
from ..rows.publish import publish_after_commit

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "EXPIRED_LIMIT",
    "PruneResult",
    "end_expired_jobs",
    "expired",
    "prune",
    "prune_expired",
    "prune_rollups",
    "prune_workers",
    "retention_period",
]

DEFAULT_BATCH_SIZE = 2000
"""Jobs deleted per transaction: small enough to keep locks short, large enough to be quick."""

EXPIRED_LIMIT = 5000
"""The most jobs one ``prune_expired`` call deletes, so a periodic caller never stalls."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True, kw_only=True)
class PruneResult:
    """What one prune did."""

    cutoff: datetime
    """Ended jobs older than this were deleted."""
    jobs: int = 0
    """Jobs deleted."""
    steps: int = 0
    """Their step rows, deleted with them."""
    more: bool = False
    """True when a ``limit`` stopped the prune before every expired job was deleted."""

    def as_json(self) -> dict[str, object]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "jobs": self.jobs,
            "steps": self.steps,
            "more": self.more,
        }


def expired(cutoff: datetime) -> Q:
    """The filter of ended jobs older than ``cutoff``; never matches a live job."""
    aged_by_ended_at = Q(ended_at__lt=cutoff)
    # No ended_at: age by the latest timestamp the row has (the derived ended_at), and keep a
    # row that has none at all.
    derived = Q(ended_at__isnull=True) & ~Q(
        created_at__isnull=True, run_at__isnull=True, started_at__isnull=True
    )
    for name in ("created_at", "run_at", "started_at"):
        derived &= Q(**{f"{name}__isnull": True}) | Q(**{f"{name}__lt": cutoff})
    return Q(state__in=ENDED_STATES) & (aged_by_ended_at | derived)


def prune(
    older_than: Duration,
    *,
    now: datetime | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    limit: int | None = None,
    progress: Progress | None = None,
    using: str | None = None,
) -> PruneResult:
    """Delete ended jobs whose end is more than ``older_than`` before ``now``, with their steps.

    ``older_than`` is a duration (``"30d"``, a ``timedelta`` or seconds). ``limit`` caps the jobs
    deleted by this call (``result.more`` then says whether some are left). ``progress(done,
    total)`` is called after each batch; ``total`` is counted once, at the start.
    """
    period = parse_duration(older_than, name="older_than")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be at least 1.")
    if limit is not None and limit < 0:
        raise ValueError(f"limit={limit!r} must be None or at least 0.")
    alias = using or jobs_settings.DATABASE
    cutoff = (now or clock.now()) - period
    condition = expired(cutoff)
    store = get_store(alias)
    jobs = Job.objects.using(alias)
    total = jobs.filter(condition).count() if progress is not None else 0
    if limit is not None and progress is not None:
        total = min(total, limit)
    deleted_jobs = deleted_steps = 0
    while limit is None or deleted_jobs < limit:
        size = batch_size if limit is None else min(batch_size, limit - deleted_jobs)
        with transaction.atomic(using=alias):
            # Lock the batch first: a concurrent retry() of one of these rows either committed
            # before (the row is live now and not selected) or waits for this transaction and
            # then finds the row gone. Rows being retried right now are passed over where the
            # store can (supports_skip_locked).
            ids = store.lock_jobs(condition, size)
            if not ids:
                break
            batch_jobs, batch_steps = _delete(store, ids)
        deleted_jobs += batch_jobs
        deleted_steps += batch_steps
        if progress is not None:
            progress(deleted_jobs, max(total, deleted_jobs))
        if len(ids) < size:
            break
    more = limit is not None and deleted_jobs >= limit and jobs.filter(condition).exists()
    prune_rollups(cutoff, using=alias)
    return PruneResult(cutoff=cutoff, jobs=deleted_jobs, steps=deleted_steps, more=more)


def prune_rollups(cutoff: datetime, *, using: str | None = None) -> int:
    """Delete the charts' rollups of the minutes and hours that began before ``cutoff``, as
    the jobs they count are (one statement per span, along the rollups' unique index)."""
    rollups = JobRollup.objects.using(using or jobs_settings.DATABASE)
    deleted = 0
    for span in (60, 900, 3600):
        deleted += rollups.filter(span=span, minute__lt=cutoff).delete()[0]
    return deleted


def _delete(store: Store, ids: list[int]) -> tuple[int, int]:
    """Delete these jobs and their steps; return (jobs, steps) deleted. Runs in the caller's
    transaction, which also adds the jobs to the pruned tally."""
    if not _needs_collector():
        # Nothing but JobStep (and a job's own parent link) points at Job and nobody listens
        # for deletions: the store deletes them by id, without loading a row.
        return store.prune_jobs(ids)
    # Another model refers to Job, or a receiver listens: let Django's collector honour them.
    store.tally_pruned(ids)
    _, per_model = Job.objects.using(store.alias).filter(pk__in=ids).only("pk").delete()
    return per_model.get(Job._meta.label, 0), per_model.get(JobStep._meta.label, 0)


def _needs_collector() -> bool:
    others = [
        r
        for r in Job._meta.related_objects
        if r.related_model is not JobStep and not (r.related_model is Job and r.name == "children")
    ]
    listened = any(
        signal.has_listeners(model)
        for signal in (pre_delete, post_delete)
        for model in (Job, JobStep)
    )
    return bool(others) or listened


def retention_period() -> timedelta | None:
    """``JOBS["RETENTION"]`` as a ``timedelta``, or None when ended jobs are kept forever."""
    value = jobs_settings.RETENTION
    if value is None:
        return None
    return parse_duration(value, name='JOBS["RETENTION"]')


def prune_expired(now: datetime | None = None, *, limit: int = EXPIRED_LIMIT) -> PruneResult | None:
    """Apply ``JOBS["RETENTION"]``: delete up to ``limit`` expired ended jobs; None when unset.

    Meant to be called periodically (a worker does it about once a minute): each call is
    bounded by ``limit``, and ``result.more`` says a backlog is left for the next call.
    """
    period = retention_period()
    if period is None:
        return None
    return prune(period, now=now, limit=limit)


def prune_workers(now: datetime | None = None, *, using: str | None = None) -> int:
    """Delete the rows of workers that stopped, or were lost, more than a day ago."""
    return prune_stopped(now or clock.now(), using=using)


#: The error recorded on a job re-asked by ``rescue_stale``.
RESCUE_ERROR = (
    "The worker running this job stopped heartbeating (crash or kill); "
    "its lease ran out and the job was re-asked."
)


def rescue_stale(store: Store, *, engine: str | None, now: datetime) -> list[tuple[int, str]]:
    """Re-ask the jobs of ``engine`` whose lease ran out (their worker died); return them."""
    return store.rescue(engine=engine, now=now, error=RESCUE_ERROR)


def end_expired_jobs(
    now: datetime | None = None, *, limit: int = EXPIRED_LIMIT, using: str | None = None
) -> list[Job]:
    """End up to ``limit`` queued jobs whose ``expires_at`` passed before they started:
    ``cancelled``, error "expired", a ``job.cancelled`` event each (after the commit); a
    parent waiting for one of them counts it as ended. Returns the jobs ended."""
    alias = using or jobs_settings.DATABASE
    with transaction.atomic(using=alias):
        ended = get_store(alias).end_expired(now or clock.now(), limit)
        for job in ended:
            publish_after_commit("job.cancelled", job, alias=alias)
    traced_expiry(ended)  # traced jobs: an "expired" event in their enqueue's trace
    return ended
