"""The locks of schedules: the scheduler tick's leader, and one owner's schedules."""

from __future__ import annotations

from typing import Any

from .core import StoreCore


class SchedulesMixin(StoreCore):
    """Locks held until the surrounding transaction ends."""

    def try_scheduler_lock(self) -> bool:
        """Lead this scheduler tick? Called inside the tick's transaction."""
        return True

    def lock_owner(self, owner_id: Any) -> None:
        """Wait for, then hold until the surrounding transaction ends, the lock of one owner's
        rows (their schedules): a count made under it stays true until the commit, with or
        without rows to lock. Call it first in the transaction."""
        raise NotImplementedError
