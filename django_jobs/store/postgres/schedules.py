"""Schedules' locks on PostgreSQL: transaction-level advisory locks."""

from __future__ import annotations

from typing import Any

from ..base.schedules import SchedulesMixin

# A fixed advisory-lock key for the scheduler's leader ("djobsched" as digits).
SCHEDULER_LOCK = 3_562_724_331_871
# The first key of an owner's advisory lock ("djow" as digits; the second key: the owner's id).
OWNER_LOCK = 35_623_015


class PostgresSchedules(SchedulesMixin):
    """The scheduler's leader and an owner's schedules, each an advisory lock."""

    def try_scheduler_lock(self) -> bool:
        # Released when the tick's transaction ends; a second scheduler skips its tick.
        return bool(self.fetchall("SELECT pg_try_advisory_xact_lock(%s)", [SCHEDULER_LOCK])[0][0])

    def lock_owner(self, owner_id: Any) -> None:
        # An advisory lock keyed by the owner (the two-key form, whose keys never meet the
        # one-key locks above): it exists whether or not the owner has rows yet, which a row
        # lock (FOR UPDATE) does not. Two owners whose ids hash alike only wait for each other.
        self.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [OWNER_LOCK, str(owner_id)])
