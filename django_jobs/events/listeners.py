"""The open SSE streams of this process, by channel: where live events are queued for them.

A stream (``streams.stream``) registers a ``Listener`` on its channel; the relay, or the Redis
subscription, hands each stored event to ``listeners.deliver``, which queues the channel's text
on every listener of the event's channels and wakes its loop. A listener more than
``MAX_PENDING`` events behind is marked ``overflow`` and re-reads the rows instead. A listener
that follows one job (``follow``) is handed only that job's events and its children's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..store.event_rows import StoredEvent
from .payloads import JobFollow, sse_channels, text_for_channel

#: Live events queued per stream; past this, the stream re-reads the rows (it loses nothing).
MAX_PENDING = 10


@dataclass(eq=False)
class Listener:
    """One open stream: its channel, its loop, and the live events queued for it."""

    channel: str
    loop: asyncio.AbstractEventLoop
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    pending: list[tuple[int, str, str]] = field(default_factory=list)
    overflow: bool = False
    #: One job's stream: only its events and its children's (``None``: every event).
    follow: JobFollow | None = None


class Listeners:
    """The streams of this process, by channel; delivery may come from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_channel: dict[str, set[Listener]] = {}

    def add(self, listener: Listener) -> None:
        with self.lock:
            self.by_channel.setdefault(listener.channel, set()).add(listener)

    def remove(self, listener: Listener) -> None:
        with self.lock:
            members = self.by_channel.get(listener.channel)
            if members is not None:
                members.discard(listener)
                if not members:
                    del self.by_channel[listener.channel]

    def deliver(self, rows: Iterable[StoredEvent]) -> None:
        """Queue each row for the streams of its channels, as each channel's reader sees it."""
        with self.lock:
            for row in rows:
                for channel in sse_channels(row.owner):
                    members = self.by_channel.get(channel)
                    if not members:
                        continue
                    text = text_for_channel(row.data, channel)
                    for listener in members:
                        follow = listener.follow
                        if follow is not None and not follow.wants(row.job_id, row.data):
                            continue
                        if len(listener.pending) < MAX_PENDING:
                            listener.pending.append((row.id, row.type, text))
                        else:
                            listener.overflow = True
                        _wake(listener)

    def catch_up_all(self) -> None:
        """Have every stream re-read the rows after its last id (after a transport outage)."""
        with self.lock:
            for members in self.by_channel.values():
                for listener in members:
                    listener.overflow = True
                    _wake(listener)


def _wake(listener: Listener) -> None:
    try:
        listener.loop.call_soon_threadsafe(listener.wake.set)
    except RuntimeError:  # its loop is closed: the stream is gone, its finally removes it
        pass


listeners = Listeners()
