"""Concurrency caps and rate limits, applied around a claim.

Before a claim, queues and tenants at their cap and kinds or queues out of rate budget are
passed over. After it, the fresh counts (every worker's committed claims included) are checked
again and anything over a cap or a rate is handed back at once, its attempt not used: two
workers racing may both hand back, never both keep.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ...conf import jobs_settings
from ...durations import parse_rate
from ...kinds.registry import all_handles
from ...store.base import Claim, ClaimSkip

if TYPE_CHECKING:
    from ...models import Job
    from ...store import Store


@dataclass
class Limits:
    global_cap: int | None = None
    queue_caps: dict[str, int] = field(default_factory=dict)
    tenant_cap: int | None = None
    kind_rates: dict[str, tuple[int, timedelta]] = field(default_factory=dict)
    queue_rates: dict[str, tuple[int, timedelta]] = field(default_factory=dict)

    @property
    def has_caps(self) -> bool:
        return bool(self.global_cap or self.queue_caps or self.tenant_cap)


def current_limits() -> Limits | None:
    """The configured caps and rates, or None when there are none (the fast path)."""
    caps = jobs_settings.CAPS or {}
    limits = Limits(
        global_cap=caps.get("global"),
        queue_caps={q: c for q, c in (caps.get("queues") or {}).items() if c},
        tenant_cap=caps.get("tenant"),
        kind_rates={h.kind: parse_rate(h.rate) for h in all_handles() if h.rate},
        queue_rates={q: parse_rate(r) for q, r in (jobs_settings.RATES or {}).items()},
    )
    if not (limits.has_caps or limits.kind_rates or limits.queue_rates):
        return None
    return limits


def _rate_usage(store: Store, limits: Limits, now: datetime) -> dict[tuple[str, str], int]:
    usage: dict[tuple[str, str], int] = {}
    for column, rates in (("kind", limits.kind_rates), ("queue", limits.queue_rates)):
        for name, (_, window) in rates.items():
            counts = store.started_since(column, [name], now - window)
            usage[(column, name)] = counts.get(name, 0)
    return usage


def claim_within_limits(store: Store, request: Claim) -> list[Job]:
    """``store.claim(request)`` that honours caps and rates; over-limit claims are handed back.

    The queues ``request.skip`` names (the paused ones) are passed over as well."""
    limits = current_limits()
    if limits is None:
        return store.claim(request)
    now = request.now
    total, per_queue, per_tenant = store.running_counts()
    usage = _rate_usage(store, limits, now)
    limit = request.limit
    if limits.global_cap is not None:
        limit = min(limit, limits.global_cap - total)
        if limit <= 0:
            return []
    skip = ClaimSkip(
        # The request's own (the paused queues), and those at their cap or out of rate.
        queues=list(request.skip.queues if request.skip else ())
        + [q for q, cap in limits.queue_caps.items() if per_queue.get(q, 0) >= cap]
        + [q for q, (n, _) in limits.queue_rates.items() if usage[("queue", q)] >= n],
        tenants=[t for t, c in per_tenant.items() if limits.tenant_cap and c >= limits.tenant_cap],
        kinds=[k for k, (n, _) in limits.kind_rates.items() if usage[("kind", k)] >= n],
        paused=list(request.skip.paused if request.skip else ()),
        fair=bool(limits.global_cap or limits.tenant_cap),
    )
    claimed = store.claim(replace(request, limit=limit, skip=skip))
    if not claimed:
        return claimed
    return _keep_within(store, limits, claimed, request.worker_id, now)


def _keep_within(
    store: Store, limits: Limits, claimed: list[Job], worker_id: str, now: datetime
) -> list[Job]:
    """Recount with everyone's claims committed; hand back what exceeds a cap or a rate."""
    ours = {job.pk for job in claimed}
    total, per_queue, per_tenant = store.running_counts()
    usage = _rate_usage(store, limits, now)
    # Counts without our fresh claims: the room we may fill, in claim order.
    total -= len(claimed)
    for job in claimed:
        per_queue[job.queue] = per_queue.get(job.queue, 0) - 1
        if job.tenant is not None:
            per_tenant[job.tenant] = per_tenant.get(job.tenant, 0) - 1
        if ("kind", job.kind) in usage:
            usage[("kind", job.kind)] -= 1
        if ("queue", job.queue) in usage:
            usage[("queue", job.queue)] -= 1
    kept, back = [], []
    for job in claimed:
        fits = (
            (limits.global_cap is None or total < limits.global_cap)
            and per_queue.get(job.queue, 0) < limits.queue_caps.get(job.queue, 1 << 30)
            and (
                job.tenant is None
                or limits.tenant_cap is None
                or per_tenant.get(job.tenant, 0) < limits.tenant_cap
            )
            and usage.get(("kind", job.kind), -1) < limits.kind_rates.get(job.kind, (1 << 30,))[0]
            and usage.get(("queue", job.queue), -1)
            < limits.queue_rates.get(job.queue, (1 << 30,))[0]
        )
        if not fits:
            back.append(job.pk)
            continue
        kept.append(job)
        total += 1
        per_queue[job.queue] = per_queue.get(job.queue, 0) + 1
        if job.tenant is not None:
            per_tenant[job.tenant] = per_tenant.get(job.tenant, 0) + 1
        for key in (("kind", job.kind), ("queue", job.queue)):
            if key in usage:
                usage[key] += 1
    if back:
        store.hand_back(worker_id, back)
    assert ours >= {job.pk for job in kept}
    return kept
