"""The WebSocket at ``ws/jobs/``: the caller's live job events, one JSON text frame each.

A frame is the same text as an SSE event's ``data``. The consumer joins one Channels group:
``django_jobs.operators`` for operators, ``django_jobs.user.<pk>`` for a member. An anonymous
handshake is rejected (the server answers 403), and so is one from a page of another site
(``origin.origin_allowed``). The socket is one-way: what the client sends is ignored. There
is no replay over the WebSocket; a client that needs one uses the SSE stream's
``Last-Event-ID`` (or reloads the jobs it shows after reconnecting).

``ws/jobs/?job=ID`` follows one job: only its events and its children's are sent
(``payloads.JobFollow``). The handshake is refused for a job the user may not see or that does
not exist (alike, so ids cannot be probed), for a ``job`` that is not a job id, and for any
other query parameter.

While open, the socket checks every ``signin.RECHECK_EVERY`` seconds that its user is still
signed in, and closes (code 4401) once they are not; a socket in the operators' group closes
(code 4403) once its user is no longer an operator, and the client connects again to its
user's own group.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from .fanout import layer_is_local
from .origin import handshake_is_secure, origin_allowed
from .payloads import (
    JOB_ID,
    JOB_PARAMETER,
    OPERATORS_GROUP,
    JobFollow,
    group_for_user,
    may_follow,
)
from .quota import REFUSED_CODE, StreamSlot, open_stream
from .relay import relay
from .signin import NO_LONGER_OPERATOR, RECHECK_EVERY, SignIn, session_key_of

logger = logging.getLogger("django_jobs.events")


class JobEventsConsumer(AsyncWebsocketConsumer):
    """Sends ``jobs.event`` group messages to the client as text frames."""

    group: str | None = None
    #: ``?job=ID``: the one job (and its children) whose events this socket sends.
    follow: JobFollow | None = None
    loop: asyncio.AbstractEventLoop | None = None
    watch: asyncio.Task[None] | None = None
    slot: StreamSlot | None = None
    #: Set once the socket is closing: frames on their way are dropped.
    closing: bool = False
    #: The close code sent when the user's sign-in ended.
    SIGNED_OUT = 4401
    #: The close code sent when an operators' socket's user is no longer an operator.
    NO_LONGER_OPERATOR = 4403

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not self._origin_allowed():
            await self.close()  # before accept: the handshake is refused
            return
        job_id = self._job_asked()
        if job_id is not None:
            if job_id == 0 or not await database_sync_to_async(may_follow)(user, job_id):
                logger.info("Refused a job WebSocket for job %s (not found, or not theirs)", job_id)
                await self.close()
                return
            self.follow = JobFollow(job_id)
        if self.channel_layer is None:
            logger.error(
                "ws/jobs/ needs a Channels layer: set CHANNEL_LAYERS (InMemoryChannelLayer for "
                "one web process, channels_redis for a fleet)."
            )
            await self.close()
            return
        self.slot = await database_sync_to_async(open_stream)(user)
        if self.slot is None:  # JOBS["MAX_STREAMS_PER_USER"] (events.quota)
            await self.accept()
            await self.close(code=REFUSED_CODE, reason="too many streams")
            return
        group = await database_sync_to_async(group_for_user)(user)
        if not await self._join(group):
            await self.accept()
            await self.close(code=1011)  # the layer is away: the client should retry later
            return
        self.group = group
        if layer_is_local(self.channel_layer):
            self.loop = asyncio.get_running_loop()
            relay.attach_loop(self.loop)
            await database_sync_to_async(relay.ensure_started)()
        await self.accept()
        sign_in = SignIn(
            user.pk, session_key_of(self.scope.get("session")), operator=group == OPERATORS_GROUP
        )
        self.watch = asyncio.get_running_loop().create_task(self._watch(sign_in))

    def _job_asked(self) -> int | None:
        """The job of ``?job=ID``; None without one; 0 for a query the socket does not read
        (any other parameter, ``job`` twice, or a value that is not a job id)."""
        raw = self.scope.get("query_string") or b""
        try:
            query = parse_qs(raw.decode("latin-1"), keep_blank_values=True, strict_parsing=True)
        except ValueError:
            return 0 if raw else None
        if not query:
            return None
        values = query.get(JOB_PARAMETER, [])
        if set(query) != {JOB_PARAMETER} or len(values) != 1:
            return 0
        return int(values[0]) if JOB_ID.fullmatch(values[0]) else 0

    def _origin_allowed(self) -> bool:
        headers = dict(self.scope.get("headers") or [])
        origin, host = headers.get(b"origin"), headers.get(b"host")
        allowed = origin_allowed(
            origin.decode("latin-1") if origin is not None else None,
            host.decode("latin-1") if host is not None else None,
            secure=handshake_is_secure(self.scope),
        )
        if not allowed:
            logger.info("Refused a job WebSocket from the origin %r", origin)
        return allowed

    async def _watch(self, sign_in: SignIn) -> None:
        """Close the socket once its user's sign-in has ended, or an operators' socket once its
        user is no longer an operator (see the module)."""
        ended = database_sync_to_async(sign_in.ended)
        while True:
            await asyncio.sleep(RECHECK_EVERY)
            try:
                why = await ended()
            except Exception:  # the database is away: ask again next time
                logger.warning("Cannot check a WebSocket's sign-in", exc_info=True)
                continue
            if why is not None:
                await self._leave()  # nothing more is sent, not even what is on its way
                code = self.NO_LONGER_OPERATOR if why == NO_LONGER_OPERATOR else self.SIGNED_OUT
                await self.close(code=code)
                return

    async def _join(self, group: str) -> bool:
        for attempt in (1, 2):  # after a Redis restart the first pooled connection may be stale
            try:
                await self.channel_layer.group_add(group, self.channel_name)
            except Exception:
                if attempt == 2:
                    logger.warning("Cannot join the Channels group %s", group, exc_info=True)
                    return False
            else:
                return True
        return False

    async def disconnect(self, code: Any) -> None:
        if self.slot is not None:
            self.slot.release()
        if self.watch is not None and self.watch is not asyncio.current_task():
            self.watch.cancel()
        await self._leave()
        if self.loop is not None:
            relay.detach_loop(self.loop)
            self.loop = None

    async def _leave(self) -> None:
        """Leave the group: no event is sent any more, not even one already on its way."""
        self.closing = True
        group, self.group = self.group, None
        if group is not None and self.channel_layer is not None:
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # the layer is away; its group entry expires on its own
                logger.debug("Cannot leave the Channels group %s", group, exc_info=True)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        return None  # one-way: nothing the client sends is read

    async def jobs_event(self, message: dict[str, Any]) -> None:
        if self.closing:
            return
        follow = self.follow
        if follow is not None and not follow.wants(message.get("job", 0), message["text"]):
            return
        await self.send(text_data=message["text"])
