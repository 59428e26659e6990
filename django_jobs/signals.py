"""The one source of job events; SSE, WebSocket and logging subscribe here.

``job_event`` is sent after the change it describes has committed, with ``type`` (one of
``job.created``, ``job.started``, ``job.progress``, ``job.log``, ``job.waiting``,
``job.succeeded``, ``job.failed``, ``job.blocked``, ``job.cancelled``, ``job.retrying``),
``job`` (the ``Job``), ``at`` (the instant) and, for ``job.log``, ``line``.

``event_rows_stored`` is the live streams' own: sent with ``rows`` (``StoredEvent``, oldest
first) once event rows are stored and committed (``engine/rows/publish.py``).
"""

from __future__ import annotations

from django.dispatch import Signal

#: The ``type`` of every job event, in lifecycle order.
EVENT_TYPES: tuple[str, ...] = (
    "job.created",
    "job.started",
    "job.progress",
    "job.log",
    "job.waiting",
    "job.succeeded",
    "job.failed",
    "job.blocked",
    "job.cancelled",
    "job.retrying",
)

# Cached per sender: sent several times for every job, it must cost next to nothing.
job_event = Signal(use_caching=True)

#: Sent with ``rows`` once event rows are stored and committed (see the module).
event_rows_stored = Signal()

#: Sent by ``ctx.step.spawn`` inside the transaction that inserts the children and records the
#: step, after the insert: ``parent`` (the ``Job``) and ``children`` (the ``Job`` rows, deduped
#: ones included). A receiver's writes commit or roll back with the children.
children_spawned = Signal()

#: Sent when the scheduler skips an occurrence of a schedule instead of firing it, with
#: ``schedule`` (the ``Schedule``), ``occurrence`` (aware UTC) and ``reason`` (text): a
#: member's schedule firing within a minute of its last job, or past its owner's
#: ``JOBS["MEMBER_RATE"]``. Sent inside the scheduler's tick; the skip is logged too.
schedule_skipped = Signal()
