"""``Suspend``: how a run parks its job in ``waiting`` without holding a worker slot.

Raised by the steps that wait (``ctx.step.sleep``, ``wait_for_event``, ``gather``) and caught
by the executor, which records the job as waiting until ``run_at`` or until it is woken.
"""

from __future__ import annotations

from datetime import datetime


class Suspend(Exception):
    """Park the job in ``waiting`` until ``run_at`` (None: until woken)."""

    def __init__(self, reason: str, run_at: datetime | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.run_at = run_at
