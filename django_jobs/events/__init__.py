"""Live job events over Server-Sent Events and WebSocket (SPEC §8; docs/events.md).

``payloads`` makes the JSON, ``outbox`` stores each event as a row (the receiver of
``job_event``), ``relay`` delivers new rows to each web process's clients, ``fanout`` hands
them to the transports (and to Redis, for a fleet), ``sse`` and ``ws`` are the endpoints.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install", "prune_events"]


def install() -> None:
    """Connect the ``job_event`` receiver that stores events (``JobsConfig.ready`` calls it)."""
    # Imported on call: this package is the parent of every transport module, and importing
    # one of them (``payloads``, ``urls``) must not load the writer, the models or Channels.
    from django.core.signals import setting_changed

    from ..engine.admission import set_created_events
    from ..signals import job_event
    from . import checks  # noqa: F401 - registers the system checks
    from .fanout import forget_transports
    from .outbox import CreatedEventWriter, on_job_event

    job_event.connect(on_job_event, dispatch_uid="django_jobs.events.outbox")
    setting_changed.connect(forget_transports, dispatch_uid="django_jobs.events.transports")
    set_created_events(CreatedEventWriter())


def prune_events(older_than: Any = None) -> int:
    """Delete event rows older than ``older_than`` (default ``JOBS["EVENT_RETENTION"]``)."""
    # On call, as in install().
    from .outbox import prune_events as prune

    return prune(older_than)
