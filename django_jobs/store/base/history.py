"""The history of a job's attempts (``Job.attempt_history``): one entry per run that ended,
appended by the statement that records how it ended, the newest ``HISTORY_KEPT`` kept.

An entry is ``{attempt, started_at, ended_at, worker, pid, outcome, error, traceback}``:
``worker`` the worker's name (``models.worker_name``), ``pid`` the process that ran it (None
when not known), ``outcome`` one of ``states.AttemptOutcome``, ``error`` the first line of the
error and ``traceback`` its whole text (None when it ended without one).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ...models import worker_name
from ...states import AttemptOutcome, JobState
from .core import StoreCore
from .requests import Outcome

#: Entries kept per job: the newest.
HISTORY_KEPT = 50

#: The outcome of a run that ended in each state, unless the run says otherwise
#: (``Outcome.label``: a lost process, a time limit).
_BY_STATE: dict[str, str] = {
    JobState.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    JobState.QUEUED: AttemptOutcome.RETRYING,
    JobState.FAILED: AttemptOutcome.FAILED,
    JobState.CANCELLED: AttemptOutcome.CANCELLED,
    JobState.WAITING: AttemptOutcome.WAITING,
    JobState.BLOCKED: AttemptOutcome.BLOCKED,
    JobState.UNKNOWN: AttemptOutcome.UNKNOWN,
}

_TRACEBACK = "\n\nTraceback (most recent call last):"


def first_line(error: str | None) -> str | None:
    """The first line of an error: what it says happened, without the frames."""
    if error is None:
        return None
    return error.partition(_TRACEBACK)[0].split("\n", 1)[0]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def entry(o: Outcome) -> dict[str, Any]:
    """The history entry of the run ``o`` ends."""
    return {
        "attempt": o.attempt,
        "started_at": _iso(o.started_at),
        "ended_at": _iso(o.ended_at),
        "worker": worker_name(o.worker_id),
        "pid": o.pid,
        "outcome": str(o.label or _BY_STATE.get(o.state, o.state)),
        "error": first_line(o.error),
        "traceback": o.error,
    }


def entry_text(o: Outcome) -> str:
    return json.dumps(entry(o), separators=(",", ":"))


class HistoryMixin(StoreCore):
    """The SQL that appends an entry: SQLite's JSON functions here, a dialect's own in its
    store (``history_append_sql``, ``worker_name_sql``, ``json_object_function``)."""

    #: The SQL function building a JSON object from key, value pairs.
    json_object_function = "json_object"

    def history_append_sql(self, column: str, entry_sql: str) -> str:
        """SQL for ``column`` with the entry ``entry_sql`` (a JSON object) appended, the
        oldest dropped past ``HISTORY_KEPT``."""
        return (
            f"json_insert(CASE WHEN json_array_length({column}) < {HISTORY_KEPT} THEN {column} "
            f"ELSE json_remove({column}, '$[0]') END, '$[#]', json({entry_sql}))"
        )

    def worker_name_sql(self, column: str) -> str:
        """SQL for the worker's name in a ``worker_id`` column: the id without its last two
        parts (``models.worker_name``)."""
        # rtrim(s, replace(s, ':', '')) is s up to its last colon: twice, less the colons.
        tail = f"rtrim({column}, replace({column}, ':', ''))"
        engine = f"substr({tail}, 1, length({tail}) - 1)"
        name = f"rtrim({engine}, replace({engine}, ':', ''))"
        return f"substr({name}, 1, length({name}) - 1)"

    def row_entry_sql(self, *, worker_sql: str, pid_sql: str, outcome: AttemptOutcome) -> str:
        """SQL for the entry of a running row's attempt ended by a statement on many rows (its
        attempt and start from the row); parameters: its end, its error (twice)."""
        return (
            f"{self.json_object_function}('attempt', attempts, 'started_at', started_at, "
            f"'ended_at', CAST(%s AS text), 'worker', {worker_sql}, 'pid', {pid_sql}, "
            f"'outcome', '{outcome.value}', 'error', CAST(%s AS text), "
            "'traceback', CAST(%s AS text))"
        )
