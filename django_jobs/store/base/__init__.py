"""What every store does, in SQL both PostgreSQL and SQLite understand.

Dialects override the statements that differ: inserting a batch, claiming, and recording
successes in bulk. Timestamps always come from the caller (the engine's clock), never from the
database's ``now()``, so tests can move time.

``Store`` (``store.py``) is made of a mixin per concern, each in its module: ``admission``,
``claims``, ``leases``, ``outcomes``, ``children``, ``maintenance``, ``steps``, ``schedules``,
``operators``, ``events`` and ``notifications``, over ``core`` (the connection, running a
statement, building jobs) and ``features`` (the capability flags). What the engine passes in
is in ``new_job`` and ``requests``; the table's names in ``columns``.
"""

from __future__ import annotations

from .columns import COLUMNS, ENDED, PRUNED_TABLE, STEP_TABLE, TABLE
from .new_job import BATCH_SHARED, INSERT_COLUMNS, NewJob, insert_sql
from .notifications import Listener
from .requests import Claim, ClaimSkip, Outcome, StepRow
from .store import Store

__all__ = [
    "BATCH_SHARED",
    "COLUMNS",
    "ENDED",
    "INSERT_COLUMNS",
    "PRUNED_TABLE",
    "STEP_TABLE",
    "TABLE",
    "Claim",
    "ClaimSkip",
    "Listener",
    "NewJob",
    "Outcome",
    "StepRow",
    "Store",
    "insert_sql",
]
