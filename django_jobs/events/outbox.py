"""The live streams' side of the event rows: stored rows to the fleet, and retention.

Every event is made into its row and stored by one path, ``engine/rows/publish.py`` (the writer
thread lives there, and ``job.created`` is stored with its job). This module hands the rows
stored in this process to Redis when a transport spans processes (``fanout.FleetPublisher``,
the receiver of ``event_rows_stored``); without Redis, each web process's relay reads the
rows instead (``relay.py``).
"""

from __future__ import annotations

import atexit
from typing import Any

from ..engine.rows.publish import prune_events, retention, writer
from ..store.event_rows import StoredEvent
from .fanout import fleet, fleet_transports

__all__ = ["on_rows_stored", "prune_events", "retention", "writer"]


def on_rows_stored(sender: Any, *, rows: list[StoredEvent], **kwargs: Any) -> None:
    """The ``event_rows_stored`` receiver: publish the rows to the fleet (when a transport
    goes through Redis; otherwise nothing, and rows a commit stored from staging are not
    read), from the publisher's own thread."""
    if fleet_transports():
        fleet.publish(list(rows))


def flush_at_exit() -> None:
    """A process that ends (``runjobs --burst``, a SIGTERM) publishes its last events first
    (the writer, whose own exit hook runs before this one, has stored them)."""
    fleet.flush()


atexit.register(flush_at_exit)
