"""The relay: one thread per web process that turns new event rows into live deliveries.

Started lazily, by the first SSE or WebSocket connection of the process. It reads the rows
after the last one it delivered, oldest first, and hands each to this process's SSE streams
(``events.listeners``) and WebSocket consumers (``group_send`` on the in-memory Channels layer, run
on the loop the consumers live on). Where the store ``supports_listen`` (PostgreSQL) it listens
on a connection of its own and reads when a notification says rows were committed (and every
half second anyway: a notification is a hint, the rows are the truth); otherwise (SQLite) it
polls every 0.2 s.

Every web process runs one, so events stored by any process (a worker, another web process)
reach clients connected anywhere, with nothing but the database between them. With Redis
(``EVENTSTREAM_REDIS`` and a Redis Channels layer) the writer publishes instead and no relay is
needed for that transport (``fanout.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from django.db import connections

from ..conf import jobs_settings
from ..store import events as store
from ..store import get_store
from ..store.event_rows import StoredEvent
from .fanout import channel_layer, layer_is_local, send_sse, send_ws, sse_uses_redis, ws_messages

logger = logging.getLogger("django_jobs.events")


class Relay:
    """See the module docstring. ``relay`` is the process's one instance."""

    #: Without ``supports_listen``: how often the relay looks for new rows.
    POLL = 0.2
    #: With ``supports_listen``: the longest wait for a notification before reading anyway.
    LISTEN_TIMEOUT = 0.5
    #: Rows read per query.
    BATCH = 500
    #: The longest wait for a loop to take a batch of WebSocket messages.
    WS_TIMEOUT = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cursor: int | None = None
        self._loops: dict[asyncio.AbstractEventLoop, int] = {}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def delivered(self) -> int | None:
        """The id of the last row handed to this process's clients; None when not running."""
        return self._cursor if self.running else None

    def ensure_started(self) -> None:
        """Start the relay unless it runs; from now on, new rows are delivered."""
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's thread is not ours
                self._reset()
            if self.running:
                return
            alias = jobs_settings.DATABASE
            self._cursor = store.latest_id(alias)
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(alias, self._stop),
                name="django_jobs-events-relay",
                daemon=True,
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and close its connections (tests, and a graceful shutdown)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None:
            thread.join(timeout)
        self._cursor = None

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """A WebSocket consumer lives on ``loop``: deliver its group messages there."""
        with self._lock:
            self._loops[loop] = self._loops.get(loop, 0) + 1

    def detach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            count = self._loops.get(loop, 0) - 1
            if count > 0:
                self._loops[loop] = count
            else:
                self._loops.pop(loop, None)

    # -- the thread ------------------------------------------------------------------------------

    def _run(self, alias: str, stop: threading.Event) -> None:
        seam = get_store(alias)
        failing = False
        try:
            while not stop.is_set():
                listen: Any = None
                try:
                    if seam.supports_listen:
                        listen = seam.listen_for_events()
                    # Read after LISTEN: a commit in between is read now, not missed.
                    self._drain(alias)
                    if failing:
                        failing = False
                        logger.warning("The live events relay reads the database again.")
                    while not stop.is_set():
                        if listen is not None:
                            listen.wait(self.LISTEN_TIMEOUT)
                        else:
                            stop.wait(self.POLL)
                        self._drain(alias)
                except Exception:
                    if not failing:
                        failing = True
                        logger.warning(
                            "The live events relay cannot read the database; retrying every "
                            "second. Clients get the missed events once it is back.",
                            exc_info=True,
                        )
                    connections[alias].close()
                    stop.wait(1.0)
                finally:
                    if listen is not None:
                        try:
                            listen.close()
                        except Exception:
                            logger.debug("Closing the LISTEN connection failed", exc_info=True)
        finally:
            connections.close_all()

    def _drain(self, alias: str) -> None:
        while True:
            cursor = self._cursor or 0
            rows = store.after(alias, cursor, limit=self.BATCH)
            if not rows:
                return
            self._deliver(rows)
            if len(rows) < self.BATCH:
                return

    def _deliver(self, rows: list[StoredEvent]) -> None:
        sse_local = not sse_uses_redis()
        for row in rows:
            # First the cursor, then the delivery: a stream that reads the rows "up to what
            # was delivered" (streams.current_id) meanwhile gets this row from
            # there or live, never from neither.
            self._cursor = row.id
            if sse_local:
                try:
                    send_sse([row])
                except Exception:
                    logger.warning("Delivering event %s over SSE failed", row.id, exc_info=True)
        layer = channel_layer()
        if layer is None or not layer_is_local(layer):
            return  # no WebSocket, or a Redis layer that the writer publishes to
        with self._lock:
            loops = list(self._loops)
        if not loops:
            return
        messages = ws_messages(rows)
        for loop in loops:
            if loop.is_closed():
                self.detach_loop(loop)
                continue
            future = asyncio.run_coroutine_threadsafe(send_ws(layer, messages), loop)
            try:
                # Wait, so that batches reach the consumers in order.
                future.result(self.WS_TIMEOUT)
            except Exception:
                future.cancel()
                logger.warning("Delivering events over WebSocket failed", exc_info=True)


relay = Relay()
