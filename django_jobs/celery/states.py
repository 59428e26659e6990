"""Celery's task states (``celery.states``), and which job states read as each.

queued, never started ........ PENDING
queued after a failed attempt  RETRY
running, waiting ............. STARTED (or the state a task set with ``update_state``)
succeeded .................... SUCCESS
failed, blocked, unknown ..... FAILURE
cancelled .................... REVOKED
"""

from __future__ import annotations

from ..states import JobState

PENDING = "PENDING"
RECEIVED = "RECEIVED"
STARTED = "STARTED"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
REVOKED = "REVOKED"
REJECTED = "REJECTED"
RETRY = "RETRY"
IGNORED = "IGNORED"

READY_STATES = frozenset({SUCCESS, FAILURE, REVOKED})
UNREADY_STATES = frozenset({PENDING, RECEIVED, STARTED, REJECTED, RETRY})
EXCEPTION_STATES = frozenset({RETRY, FAILURE, REVOKED})
PROPAGATE_STATES = frozenset({FAILURE, REVOKED})
ALL_STATES = frozenset({PENDING, RECEIVED, STARTED, SUCCESS, FAILURE, RETRY, REVOKED})

_OF_JOB = {
    JobState.RUNNING: STARTED,
    JobState.WAITING: STARTED,
    JobState.SUCCEEDED: SUCCESS,
    JobState.FAILED: FAILURE,
    JobState.BLOCKED: FAILURE,
    JobState.UNKNOWN: FAILURE,
    JobState.CANCELLED: REVOKED,
}


def of_job(state: str, attempts: int) -> str:
    """The Celery state a job in ``state`` after ``attempts`` attempts reads as."""
    if state == JobState.QUEUED:
        return RETRY if attempts > 0 else PENDING
    return _OF_JOB[JobState(state)]
