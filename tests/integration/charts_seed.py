"""A week of rollups for the charts' tests and screenshot: two queues, three kinds, a daily
rhythm, a slow kind, a backlog that builds and drains, a few failures."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from django_jobs.histograms import histogram
from django_jobs.models import JobRollup, RollupMark

KINDS = {"shop.send_receipt": ("mail", 40.0), "shop.resize_image": ("default", 900.0),
         "shop.sync_stock": ("default", 6500.0)}  # fmt: skip


def seed_history(now: datetime, *, days: int = 7) -> int:
    """Hour rows for ``days`` days, quarter-hour and minute rows for the last day before
    ``now``, as the duty folds them; return
    how many rows were written."""
    end = now.astimezone(UTC).replace(second=0, microsecond=0)
    rows: list[JobRollup] = []
    for span, count in ((3600, days * 24), (900, 96), (60, 24 * 60)):
        epoch = int(end.timestamp())
        start = datetime.fromtimestamp(epoch - epoch % span, UTC)
        for i in range(1, count + 1):
            minute = start - timedelta(seconds=span * i)
            rows += _rows(minute, span)
    JobRollup.objects.bulk_create(rows, batch_size=2000)
    RollupMark.objects.update_or_create(engine="default", defaults={"closed_until": end})
    return len(rows)


def _rows(minute: datetime, span: int) -> list[JobRollup]:
    hours = minute.timestamp() / 3600
    busy = 1.0 + 0.8 * math.sin(hours / 24 * 2 * math.pi)  # a day's rhythm
    scale = span / 60
    rows = []
    for kind, (queue, ms) in KINDS.items():
        n = max(1, round(12 * busy * scale))
        failed = round(n * 0.04) if (int(hours) % 5 == 0) else 0
        runtime = [
            ms * (0.6 + 0.8 * ((j * 7919) % 100) / 100) * (1 + 0.5 * busy) for j in range(20)
        ]
        pickup = [5.0 + 400 * busy * ((j * 104729) % 100) / 100 for j in range(20)]
        weight = max(1, n // 20)
        rows.append(
            JobRollup(
                minute=minute,
                span=span,
                queue=queue,
                kind=kind,
                succeeded=n - failed,
                failed=failed,
                runtime={k: v * weight for k, v in histogram(runtime).items()},
                pickup={k: v * weight for k, v in histogram(pickup).items()},
            )
        )
    for queue, base in (("default", 30), ("mail", 4)):
        depth = round(base * busy * busy)
        rows.append(
            JobRollup(
                minute=minute,
                span=span,
                queue=queue,
                kind="",
                depth=depth,
                oldest_age_s=depth * 1.5,
            )
        )
    return rows
