"""Server-Sent Events with django-eventstream: the channel manager, the storage and the view.

Settings (see docs/events.md)::

    EVENTSTREAM_CHANNELMANAGER_CLASS = "django_jobs.events.sse.JobsChannelManager"
    EVENTSTREAM_STORAGE_CLASS = "django_jobs.events.sse.JobEventStorage"

Channels: ``jobs-operators`` carries every event, ``jobs-user-<pk>`` one owner's. The view
picks the caller's one channel itself (a client cannot ask for another), and the channel
manager refuses jobs channels to anyone else on any other eventstream view. Channels that
are not ours keep eventstream's default behaviour (readable by all, stored by eventstream's
own ``DjangoModelStorage``).

The storage reads the event rows: an event's SSE id is ``<channel>:<row id>``, and a client
reconnecting with ``Last-Event-ID`` gets the rows after it. This module leans on eventstream
5.3's internals in two places (pinned ``<5.4``, covered by tests): ``send_event`` takes the
event id from ``storage.append_event``, and, with ``EVENTSTREAM_REDIS``, the supervised Redis
subscription below replaces eventstream's own, which stops for good when Redis goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django_eventstream.channelmanager import DefaultChannelManager
from django_eventstream.event import Event
from django_eventstream.storage import DjangoModelStorage, EventDoesNotExist, StorageBase

from ..conf import jobs_settings
from . import store
from .fanout import sse_uses_redis
from .payloads import channel_for_user, channel_owner, is_jobs_channel, may_read_channel
from .store import StoredEvent

logger = logging.getLogger("django_jobs.events")

_relaying = threading.local()


@contextlib.contextmanager
def relaying(row: StoredEvent) -> Iterator[None]:
    """While inside, ``JobEventStorage.append_event`` on this thread answers ``row``'s id."""
    _relaying.row = row
    try:
        yield
    finally:
        _relaying.row = None


class JobsChannelManager(DefaultChannelManager):
    """Jobs channels: operators read every one, a member only their own, anonymous none."""

    def can_read_channel(self, user: Any, channel: str) -> bool:
        if is_jobs_channel(channel):
            return may_read_channel(user, channel)
        return super().can_read_channel(user, channel)


class JobEventStorage(StorageBase):
    """eventstream's storage over the event rows (jobs channels), ``DjangoModelStorage`` else.

    Event ids are row ids: one sequence for every channel, so a user channel's ids have gaps
    (other users' events), which eventstream does not mind.
    """

    def __init__(self) -> None:
        self.other = DjangoModelStorage()

    def append_event(self, channel: str, event_type: str, data: Any) -> Event:
        if not is_jobs_channel(channel):
            return self.other.append_event(channel, event_type, data)
        row = getattr(_relaying, "row", None)
        if row is None:
            raise ValueError(
                f"Events of channel {channel!r} come from the job event rows; they are sent by "
                "django_jobs itself. Publish a job event with django_jobs.engine.events.publish, "
                "or use a channel whose name does not start with 'jobs-'."
            )
        return Event(channel, event_type, data, id=row.id)

    def get_events(self, channel: str, last_id: int, limit: int = 100) -> list[Event]:
        if not is_jobs_channel(channel):
            return self.other.get_events(channel, last_id, limit=limit)
        alias = jobs_settings.DATABASE
        current = self.get_current_id(channel)
        if last_id and not store.exists(alias, last_id):
            oldest = store.oldest_id(alias)
            if oldest is None or last_id < oldest:
                # Pruned: what came after it may be gone too. eventstream sends stream-reset.
                raise EventDoesNotExist(f"Event {last_id} was pruned", current)
        rows = store.after(alias, last_id, upto=current, owner=channel_owner(channel), limit=limit)
        return [Event(channel, row.type, row.data, id=row.id) for row in rows]

    def get_current_id(self, channel: str) -> int:
        if not is_jobs_channel(channel):
            return self.other.get_current_id(channel)
        from .relay import relay

        # With the relay delivering SSE here, "current" is what it has delivered: what comes
        # after reaches the client live, so replay and live delivery neither overlap nor leave
        # a hole. Through Redis, it is the newest row.
        delivered = None if sse_uses_redis() else relay.delivered()
        return delivered if delivered is not None else store.latest_id(jobs_settings.DATABASE)


def signed_in_user(request: HttpRequest) -> Any:
    """The session's user, else whoever the API's authenticators recognise; None if anonymous."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return user
    from rest_framework.request import Request
    from rest_framework.settings import api_settings

    authenticators = [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    try:
        user = Request(request, authenticators=authenticators).user
    except Exception:  # AuthenticationFailed: refused credentials are a 401 like none
        return None
    return user if user is not None and user.is_authenticated else None


def unauthenticated() -> HttpResponse:
    response = JsonResponse(
        {
            "code": "NOT_AUTHENTICATED",
            "message": "Sign in first: the event stream needs the session cookie of a signed-in "
            "user (or credentials the API accepts).",
        },
        status=401,
    )
    response["WWW-Authenticate"] = 'Session realm="api"'
    return response


def events(request: HttpRequest) -> HttpResponse:
    """``GET events/``: the caller's live job events as Server-Sent Events (SPEC §8)."""
    from django_eventstream.views import events as eventstream_events

    if request.method != "GET":
        response = JsonResponse(
            {"code": "METHOD_NOT_ALLOWED", "message": "The event stream answers GET only."},
            status=405,
        )
        response["Allow"] = "GET"
        return response
    user = signed_in_user(request)
    if user is None:
        return unauthenticated()
    request.user = user
    channel = channel_for_user(user)
    if sse_uses_redis():
        claim_redis_subscription()
    else:
        from .relay import relay

        relay.ensure_started()
    response = eventstream_events(request, channels=[channel])
    if sse_uses_redis() and getattr(response, "is_async", False):
        response.streaming_content = _with_redis_subscription(response.streaming_content)
    return response


# -- Redis (EVENTSTREAM_REDIS): a subscription that survives Redis restarts ---------------------

_redis_task: asyncio.Task[None] | None = None
_redis_lock = threading.Lock()


def claim_redis_subscription() -> None:
    """Stop eventstream from starting its own Redis subscription: ours is supervised."""
    from django_eventstream.views import get_listener_manager

    manager = get_listener_manager()
    with manager.lock:
        manager.redis_listener_started = True


async def _with_redis_subscription(content: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    ensure_redis_subscription()
    async for chunk in content:
        yield chunk


def ensure_redis_subscription() -> None:
    """Start the supervised subscription on the running loop, once per loop."""
    global _redis_task
    loop = asyncio.get_running_loop()
    with _redis_lock:
        task = _redis_task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        _redis_task = loop.create_task(_subscribe_forever(), name="django_jobs-events-redis")


async def _subscribe_forever() -> None:
    """Subscribe to eventstream's Redis channel; on loss, wait, resubscribe and catch up."""
    from django.conf import settings
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    # No silent reconnection: every loss must surface here, for the catch-up below. A
    # subscription waits for messages as long as it takes.
    options = {
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
            await pubsub.subscribe("events_channel")
            if lost:
                logger.warning("Redis is back: live events flow again.")
            lost = False
            # Whatever was sent before this subscription (while Redis was away, or while it
            # was being made) is in the rows: have the streams read it from there.
            _catch_up_listeners()
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    _deliver_redis_message(message["data"])
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


def _deliver_redis_message(raw: Any) -> None:
    from django_eventstream.views import get_listener_manager

    message = json.loads(raw)
    pub_id = message.get("pub_id")
    event = Event(
        message["channel"],
        message["event_type"],
        message["data"],
        id=int(pub_id) if pub_id is not None else None,
    )
    get_listener_manager().add_to_queues(message["channel"], event)


def _catch_up_listeners() -> None:
    """Have every local stream re-read the rows after its last id (as after an overflow)."""
    from django_eventstream.views import get_listener_manager

    manager = get_listener_manager()
    with manager.lock:
        listeners = {
            listener
            for channel, members in manager.listeners_by_channel.items()
            if is_jobs_channel(channel)
            for listener in members
        }
        for listener in listeners:
            listener.overflow = True
            listener.wake_threadsafe()
