"""Live job events over Server-Sent Events and WebSocket (SPEC §8; docs/events.md).

Events are made into rows and stored by ``engine/rows/publish.py``; here ``payloads`` addresses
them, ``outbox`` hands the rows stored in this process to Redis (for a fleet), ``relay``
delivers new rows to each web process's clients, ``fanout`` hands them to the transports,
``sse`` and ``ws`` are the endpoints.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install", "prune_events"]


def install() -> None:
    """Connect the receivers of the live streams (``JobsConfig.ready`` calls it)."""
    # Imported on call: this package is the parent of every transport module, and importing
    # one of them (``payloads``, ``urls``) must not load the writer, the models or Channels.
    from django.core.signals import setting_changed

    from ..signals import event_rows_stored
    from . import checks  # noqa: F401 - registers the system checks
    from .fanout import forget_transports
    from .outbox import on_rows_stored

    event_rows_stored.connect(on_rows_stored, dispatch_uid="django_jobs.events.outbox")
    setting_changed.connect(forget_transports, dispatch_uid="django_jobs.events.transports")


def prune_events(older_than: Any = None) -> int:
    """Delete event rows older than ``older_than`` (default ``JOBS["EVENT_RETENTION"]``)."""
    # On call, as in install().
    from ..engine.rows.publish import prune_events as prune

    return prune(older_than)
