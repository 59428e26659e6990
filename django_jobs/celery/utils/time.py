"""``celery.utils.time``: its helpers (``maybe_timedelta``, ``remaining``...) serve custom
schedule classes, which have no counterpart here; refused where it is imported."""

from __future__ import annotations

raise NotImplementedError(
    "celery.utils.time is not part of django_jobs.celery: it serves custom beat schedule "
    "classes (BaseSchedule with is_due/remaining_estimate), which have no counterpart. Declare a "
    "cron or an interval schedule whose job checks the rule first and returns early when it "
    "does not hold (docs/migrating-from-celery.md, 'A custom beat schedule class')."
)
