"""Handing stored events to the two transports, addressed.

- SSE: this process's streams (``events.listeners``), on each of the event's channels, with
  the row id as the event id, so live delivery and ``Last-Event-ID`` replay agree. With
  ``EVENTSTREAM_REDIS``, every web process's streams, through Redis (``redis_sse``).
- WebSocket: ``group_send`` of ``{"type": "jobs.event", "text": <JSON>}`` on each of the
  event's groups of the default Channels layer.

Each address gets its reader's text: the operators' the stored one, an owner's its member
view (``payloads.text_for_channel`` / ``text_for_group``).

Who calls them: without Redis, each web process's relay (``relay.py``) reads the rows and
delivers them locally. With Redis (``EVENTSTREAM_REDIS`` for SSE, a layer other than
``InMemoryChannelLayer`` for the WebSocket), the process that stored the rows publishes them
once, from ``FleetPublisher``'s own thread: a Redis that is down or slow never holds up storing
events, and never a job.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any

from django.conf import settings

from ..store.event_rows import StoredEvent
from .listeners import listeners
from .payloads import WS_MESSAGE_TYPE, text_for_group, ws_groups
from .redis_sse import forget_client, publish

logger = logging.getLogger("django_jobs.events")


def sse_uses_redis() -> bool:
    """True when SSE events go through Redis (``EVENTSTREAM_REDIS`` is set)."""
    return hasattr(settings, "EVENTSTREAM_REDIS")


def channel_layer() -> Any:
    """The default Channels layer, or None when none is configured (or it cannot be built)."""
    try:
        from channels.layers import get_channel_layer

        return get_channel_layer()
    except Exception:
        logger.warning(
            "The Channels layer cannot be built; WebSocket events are off.", exc_info=True
        )
        return None


def layer_is_local(layer: Any) -> bool:
    """True for a layer that only reaches consumers of this process (``InMemoryChannelLayer``)."""
    from channels.layers import InMemoryChannelLayer

    return isinstance(layer, InMemoryChannelLayer)


def fleet_transports() -> frozenset[str]:
    """The transports that span processes through Redis: ``"sse"``, ``"ws"``, both or none.

    Asked for every stored batch, and for every enqueue: worked out once, again when
    ``EVENTSTREAM_REDIS`` or ``CHANNEL_LAYERS`` change (``forget_transports``).
    """
    global _transports
    if _transports is None:
        transports = {"sse"} if sse_uses_redis() else set()
        layer = channel_layer()
        if layer is not None and not layer_is_local(layer):
            transports.add("ws")
        _transports = frozenset(transports)
    return _transports


_transports: frozenset[str] | None = None


def forget_transports(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: the transports are worked out again when next asked."""
    global _transports
    if setting in ("EVENTSTREAM_REDIS", "CHANNEL_LAYERS"):
        _transports = None
    if setting == "EVENTSTREAM_REDIS":
        forget_client()


def send_sse(rows: list[StoredEvent]) -> None:
    """Hand the rows to this process's SSE streams (the relay's delivery)."""
    listeners.deliver(rows)


def publish_sse(rows: list[StoredEvent]) -> None:
    """Publish the rows to every web process's SSE streams, through Redis."""
    publish(rows)


def ws_messages(rows: list[StoredEvent]) -> list[tuple[str, dict[str, Any]]]:
    """The ``group_send`` calls of the rows: each group with its reader's text (and the
    event's job id, for the sockets that follow one job)."""
    return [
        (
            group,
            {"type": WS_MESSAGE_TYPE, "text": text_for_group(row.data, group), "job": row.job_id},
        )
        for row in rows
        for group in ws_groups(row.owner)
    ]


async def send_ws(layer: Any, messages: list[tuple[str, dict[str, Any]]]) -> None:
    """``group_send`` the messages one after the other (in order)."""
    for group, message in messages:
        await layer.group_send(group, message)


class FleetPublisher:
    """Publishes stored events to Redis, from a thread of its own (see the module)."""

    #: After a failure, the next try waits this long (the failed events stay in the database).
    RETRY_AFTER = 1.0
    #: Batches kept while the publisher is behind; the oldest are dropped past this.
    MAX_BACKLOG = 1000

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._backlog: deque[list[StoredEvent]] = deque(maxlen=self.MAX_BACKLOG)
        self._thread: threading.Thread | None = None
        self._busy = False
        self._paused_until = {"sse": 0.0, "ws": 0.0}
        self._down: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def publish(self, rows: list[StoredEvent]) -> None:
        """Publish ``rows`` soon, if a transport spans processes; otherwise do nothing."""
        if not rows or not fleet_transports():
            return
        with self._cond:
            self._backlog.append(rows)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="django_jobs-events-publisher", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every batch handed over was published (or skipped)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._backlog or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        while True:
            with self._cond:
                while not self._backlog:
                    self._cond.wait()
                rows = self._backlog.popleft()
                self._busy = True
            try:
                self._publish(rows)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _publish(self, rows: list[StoredEvent]) -> None:
        if sse_uses_redis():
            self._attempt("sse", lambda: publish_sse(rows))
        layer = channel_layer()
        if layer is not None and not layer_is_local(layer):
            loop = self._loop
            assert loop is not None
            self._attempt("ws", lambda: loop.run_until_complete(send_ws(layer, ws_messages(rows))))

    def _attempt(self, transport: str, send: Any) -> None:
        wait = self._paused_until[transport] - time.monotonic()
        if wait > 0:  # the last try failed just now: give the transport a moment
            time.sleep(wait)
        for attempt in (1, 2):  # a second try gets a fresh connection (stale after a restart)
            try:
                send()
            except Exception:
                if attempt == 1:
                    continue
                self._failed(transport)
                return
            break
        if transport in self._down:
            self._down.discard(transport)
            logger.warning("Live events are published over %s again.", _NAMES[transport])

    def _failed(self, transport: str) -> None:
        """Give up on this batch and on those queued behind it: they were made while the
        transport was away, and they are in the rows (SSE clients catch up from there once
        their server's subscription is back; WebSocket clients reload)."""
        self._paused_until[transport] = time.monotonic() + self.RETRY_AFTER
        with self._cond:
            self._backlog.clear()
        if transport not in self._down:
            self._down.add(transport)
            logger.warning(
                "Cannot publish live events over %s; jobs go on, the events stay in the "
                "database for replay, and publishing resumes when it is back.",
                _NAMES[transport],
                exc_info=True,
            )


_NAMES = {"sse": "Redis (SSE)", "ws": "the Channels layer (WebSocket)"}


fleet = FleetPublisher()
