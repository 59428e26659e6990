"""One SSE stream's body: replay from the rows after the client's last id, then the live loop.

The job streams are served here, not by django-eventstream's view, and take no setting: the
rows are the storage (an event's SSE id is ``<channel>:<row id>``), the channel is the
caller's own (``payloads.channel_for_user``), and the listeners are this module's, so no other
eventstream view of the project can hear a job channel whatever ``EVENTSTREAM_*`` says. The
wire format is django-eventstream's (``stream-open``, ``keep-alive``, ``stream-reset``, its
event encoding), so its clients work unchanged.

Order: a stream registers its listener first, then reads the rows after the client's last id
up to what was delivered live; a live event that the read already gave is not sent twice.
A stream that falls more than ``MAX_PENDING`` live events behind reads the rows again instead.

One job's stream (``?job=ID``) is the same on its reader's channel, with a ``JobFollow``: live,
the listener is handed only that job's events and its children's; replay reads only theirs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django_eventstream.utils import sse_encode_event

from ..conf import jobs_settings
from ..store import events as store
from .fanout import sse_uses_redis
from .listeners import Listener, listeners
from .payloads import JobFollow, channel_owner, text_for_channel
from .relay import relay
from .signin import NO_LONGER_OPERATOR, RECHECK_EVERY, SignIn

logger = logging.getLogger("django_jobs.events")

#: Rows read per replay query.
REPLAY_BATCH = 500
#: An idle stream sends a ``keep-alive`` event this often (as django-eventstream does).
KEEP_ALIVE = 20.0

# A browser shows nothing until it has received some bytes: the first chunk is padded.
OPENING = ":" + " " * 2048 + "\n\nevent: stream-open\ndata:\n\n"
KEEP_ALIVE_EVENT = "event: keep-alive\ndata:\n\n"


def frame(channel: str, event_id: int, event_type: str, text: str) -> str:
    """One event on the wire: ``event:`` its type, ``id:`` ``<channel>:<id>``, ``data:``."""
    return sse_encode_event(event_type, text, event_id=f"{channel}:{event_id}")


def session_ended_event() -> str:
    """Sent before a stream closes because its user's sign-in ended (no ``id:``: a client
    that signs in again resumes from its last real event)."""
    return (
        "event: stream-error\n"
        'data: {"condition":"unauthorized","text":"The sign-in of this stream ended (signed '
        'out, session expired or user deactivated). Sign in again, then reconnect."}\n\n'
    )


def no_longer_operator_event() -> str:
    """Sent before an operators' stream closes because its user is no longer an operator (no
    ``id:``; the ids of the operators' channel mean nothing on the user's own)."""
    return (
        "event: stream-error\n"
        'data: {"condition":"forbidden","text":"The user of this stream is no longer an '
        "operator: it carried every job's events. Reconnect to receive your own jobs' "
        'events."}\n\n'
    )


def current_id() -> int:
    """The id up to which this process has delivered events live (see the module)."""
    delivered = None if sse_uses_redis() else relay.delivered()
    return delivered if delivered is not None else store.latest_id(jobs_settings.DATABASE)


@dataclass
class Replay:
    """What one read of the rows gives a stream."""

    body: str
    last_id: int
    ids: set[int]
    more: bool


def replay(channel: str, last_id: int, upto: int, follow: JobFollow | None = None) -> Replay:
    """The channel's events with ``last_id < id <= upto`` (at most ``REPLAY_BATCH``), or a
    ``stream-reset`` when ``last_id`` was pruned (what followed it may be gone too); with
    ``follow``, only those of its job and the job's children."""
    alias = jobs_settings.DATABASE
    if last_id and not store.exists(alias, last_id):
        oldest = store.oldest_id(alias)
        if oldest is None or last_id < oldest:
            reset = sse_encode_event(
                "stream-reset",
                {"channels": [channel]},
                event_id=f"{channel}:{upto}",
                json_encode=True,
            )
            return Replay(reset, upto, set(), more=False)
    rows = store.after(
        alias,
        last_id,
        upto=upto,
        owner=channel_owner(channel),
        job=follow.job_id if follow is not None else None,
        limit=REPLAY_BATCH,
    )
    body = "".join(
        frame(channel, row.id, row.type, text_for_channel(row.data, channel)) for row in rows
    )
    if follow is not None:
        follow.ids.update(row.job_id for row in rows)
    last = rows[-1].id if rows else last_id
    return Replay(body, last, {row.id for row in rows}, more=len(rows) == REPLAY_BATCH)


def _read(channel: str, last_id: int | None, follow: JobFollow | None = None) -> tuple[Replay, int]:
    upto = current_id()
    if last_id is None:  # a new client: only what comes next
        return Replay("", upto, set(), more=False), upto
    return replay(channel, last_id, upto, follow), upto


_read_async = database_sync_to_async(_read)
_replay_async = database_sync_to_async(replay)
_ended = database_sync_to_async(SignIn.ended)


async def stream(
    channel: str, last_id: int | None, sign_in: SignIn, follow: JobFollow | None = None
) -> AsyncIterator[str]:
    """The SSE body of one client of ``channel``, resuming after ``last_id`` when given; with
    ``follow``, only the events of its job and the job's children."""
    listener = Listener(channel, asyncio.get_running_loop(), follow=follow)
    listeners.add(listener)
    try:
        got, upto = await _read_async(channel, last_id, follow)
        yield OPENING + got.body
        last, sent = got.last_id, got.ids
        while got.more:
            got = await _replay_async(channel, last, upto, follow)
            last, sent = got.last_id, sent | got.ids
            yield got.body
        next_check = time.monotonic() + RECHECK_EVERY
        quiet_since = time.monotonic()
        while True:
            now = time.monotonic()
            timeout = max(min(next_check, quiet_since + KEEP_ALIVE) - now, 0)
            try:
                await asyncio.wait_for(listener.wake.wait(), timeout)
            except TimeoutError:
                pass
            if time.monotonic() >= next_check:
                try:
                    ended = await _ended(sign_in)
                except Exception:  # the database is away: ask again at the next check
                    logger.warning("Cannot check an event stream's sign-in", exc_info=True)
                    ended = None
                if ended is not None:  # what is pending is dropped: it may be another's
                    if ended == NO_LONGER_OPERATOR:
                        yield no_longer_operator_event()
                    else:
                        yield session_ended_event()
                    return
                next_check = time.monotonic() + RECHECK_EVERY
            with listeners.lock:
                pending, listener.pending = listener.pending, []
                overflow, listener.overflow = listener.overflow, False
                listener.wake.clear()
            body = ""
            for event_id, event_type, text in pending:
                if event_id in sent:  # the read of the rows gave it already
                    continue
                body += frame(channel, event_id, event_type, text)
                last = max(last, event_id)
            if overflow:  # fell behind: what was dropped is in the rows
                got, upto = await _read_async(channel, last, follow)
                body += got.body
                last, sent = got.last_id, got.ids
                while got.more:
                    got = await _replay_async(channel, last, upto, follow)
                    body += got.body
                    last, sent = got.last_id, sent | got.ids
            if not body and time.monotonic() - quiet_since >= KEEP_ALIVE:
                body = KEEP_ALIVE_EVENT
            if body:
                quiet_since = time.monotonic()
                yield body
    finally:
        listeners.remove(listener)
