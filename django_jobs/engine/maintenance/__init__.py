"""Maintenance of the queue: the duties every worker runs beside its claims.

    duties.py     retention (``prune``, ``prune_expired``), expiry (``end_expired_jobs``),
                  the fleet's old rows (``prune_workers``) and the rescue of jobs whose
                  worker stopped heartbeating (``rescue_stale``)

A worker runs them on its keeper thread, one small service each over ``duties``:

    cadence.py    ``Duty``: a chore with an interval, run when due; ``Every``: a plain function
    retention.py  ``Retention``: the retention and the fleet's old rows, once a minute
    rescue.py     ``Rescue``: jobs whose worker died asked again
    expiry.py     ``Expiry``: expired jobs ended, with the rescue's cadence
    rollups.py    ``Rollups``: each finished minute's jobs counted for the charts, once
    ticks.py      ``ScheduleTicker``: the scheduler's tick, timed by the next occurrence

``django_jobs.engine.maintenance.prune_expired`` and the others are documented paths: they stay
importable from here.
"""

from __future__ import annotations

from .duties import (
    DEFAULT_BATCH_SIZE,
    EXPIRED_LIMIT,
    RESCUE_ERROR,
    Progress,
    PruneResult,
    end_expired_jobs,
    expired,
    prune,
    prune_expired,
    prune_rollups,
    prune_workers,
    rescue_stale,
    retention_period,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "EXPIRED_LIMIT",
    "RESCUE_ERROR",
    "Progress",
    "PruneResult",
    "end_expired_jobs",
    "expired",
    "prune",
    "prune_expired",
    "prune_rollups",
    "prune_workers",
    "rescue_stale",
    "retention_period",
]
