"""The one source of job events; SSE, WebSocket and logging subscribe here.

``job_event`` is sent after the change it describes has committed, with ``type`` (one of
``job.created``, ``job.started``, ``job.progress``, ``job.log``, ``job.waiting``,
``job.succeeded``, ``job.failed``, ``job.blocked``, ``job.cancelled``, ``job.retrying``),
``job`` (the ``Job``), ``at`` (the instant) and, for ``job.log``, ``line``.
"""

from __future__ import annotations

from django.dispatch import Signal

job_event = Signal()

#: Sent inside the admitting transaction with ``jobs`` (the new jobs) and ``alias``: a
#: receiver that stores events writes their ``job.created`` here, so the event commits with
#: the jobs and is stored before any worker can start them. ``job_event`` for ``job.created``
#: still follows the commit, with ``stored=True``.
jobs_admitted = Signal()
