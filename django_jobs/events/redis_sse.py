"""SSE through Redis (``EVENTSTREAM_REDIS``): publishing stored rows, and each web process's
subscription, which survives Redis restarts.

The process that stores events publishes each batch once, on django_jobs' own Redis channel
(``REDIS_CHANNEL``; never eventstream's, whose listeners serve other channels). Every web
process subscribes once, on its event loop, and hands the rows to its streams
(``events.listeners``), which pick each channel's text as the relay does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from ..store.event_rows import StoredEvent
from .listeners import listeners

logger = logging.getLogger("django_jobs.events")

#: The Redis Pub/Sub channel of job events.
REDIS_CHANNEL = "django_jobs.events"

_client: Any = None


def publish(rows: list[StoredEvent]) -> None:
    """Publish ``rows`` in one message (raises when Redis is away; ``FleetPublisher`` retries)."""
    global _client
    from django.conf import settings
    from redis import Redis

    if _client is None:
        _client = Redis(**settings.EVENTSTREAM_REDIS)
    message = json.dumps([[r.id, r.type, r.job_id, r.owner, r.data] for r in rows])
    try:
        _client.publish(REDIS_CHANNEL, message)
    except Exception:
        _client = None  # the next try gets a new client (and connection)
        raise


def forget_client() -> None:
    global _client
    _client = None


def _deliver(raw: Any) -> None:
    listeners.deliver([StoredEvent(*row) for row in json.loads(raw)])


_task: asyncio.Task[None] | None = None
_lock = threading.Lock()


async def ensure_subscription(content: AsyncIterator[str]) -> AsyncIterator[str]:
    """``content``, once this loop's subscription is running (started by the first stream)."""
    global _task
    loop = asyncio.get_running_loop()
    with _lock:
        task = _task
        if task is None or task.done() or task.get_loop() is not loop:
            _task = loop.create_task(_subscribe_forever(), name="django_jobs-events-redis")
    async for chunk in content:
        yield chunk


async def _subscribe_forever() -> None:
    """Subscribe; on loss, wait, resubscribe and have every stream catch up from the rows."""
    from django.conf import settings
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    # No silent reconnection: every loss must surface here, for the catch-up below. A
    # subscription waits for messages as long as it takes.
    options: dict[str, Any] = {
        **settings.EVENTSTREAM_REDIS,
        "retry": Retry(NoBackoff(), 0),
        "retry_on_error": [],
        "socket_timeout": None,
    }
    lost = False
    while True:
        client = Redis(**options)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe(REDIS_CHANNEL)
            if lost:
                logger.warning("Redis is back: live events flow again.")
            lost = False
            # Whatever was sent before this subscription (while Redis was away, or while it
            # was being made) is in the rows: have the streams read it from there.
            listeners.catch_up_all()
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    _deliver(message["data"])
        except asyncio.CancelledError:
            raise
        except Exception:
            if not lost:
                logger.warning(
                    "Lost the Redis subscription of live events; resubscribing.", exc_info=True
                )
            lost = True
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            with contextlib.suppress(Exception):
                await client.aclose()
        await asyncio.sleep(0.5)
