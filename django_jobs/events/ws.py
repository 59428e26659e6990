"""The WebSocket at ``ws/jobs/``: the caller's live job events, one JSON text frame each.

A frame is the same text as an SSE event's ``data``. The consumer joins one Channels group:
``django_jobs.operators`` for operators, ``django_jobs.user.<pk>`` for a member. An anonymous
handshake is rejected (the server answers 403). The socket is one-way: what the client sends
is ignored. There is no replay over the WebSocket; a client that needs one uses the SSE
stream's ``Last-Event-ID`` (or reloads the jobs it shows after reconnecting).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from .fanout import layer_is_local
from .payloads import group_for_user

logger = logging.getLogger("django_jobs.events")


class JobEventsConsumer(AsyncWebsocketConsumer):
    """Sends ``jobs.event`` group messages to the client as text frames."""

    group: str | None = None
    loop: asyncio.AbstractEventLoop | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused
            return
        if self.channel_layer is None:
            logger.error(
                "ws/jobs/ needs a Channels layer: set CHANNEL_LAYERS (InMemoryChannelLayer for "
                "one web process, channels_redis for a fleet)."
            )
            await self.close()
            return
        group = await database_sync_to_async(group_for_user)(user)
        if not await self._join(group):
            await self.accept()
            await self.close(code=1011)  # the layer is away: the client should retry later
            return
        self.group = group
        if layer_is_local(self.channel_layer):
            from .relay import relay

            self.loop = asyncio.get_running_loop()
            relay.attach_loop(self.loop)
            await database_sync_to_async(relay.ensure_started)()
        await self.accept()

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
        if self.group is not None and self.channel_layer is not None:
            try:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            except Exception:  # the layer is away; its group entry expires on its own
                logger.debug("Cannot leave the Channels group %s", self.group, exc_info=True)
        if self.loop is not None:
            from .relay import relay

            relay.detach_loop(self.loop)
            self.loop = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        return None  # one-way: nothing the client sends is read

    async def jobs_event(self, message: dict[str, Any]) -> None:
        await self.send(text_data=message["text"])
