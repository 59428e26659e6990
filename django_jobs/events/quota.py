"""How many live streams (SSE and WebSocket) each member holds open in this web process.

``JOBS["MAX_STREAMS_PER_USER"]`` (default 8) bounds them: the endpoints ask ``open_stream``
before they start one and answer the next one 429 (SSE) or close it with ``REFUSED_CODE``
(WebSocket). Operators are not counted. The count is this process's: a stream lives in one
process, and counting across processes would need a row that a killed process leaves behind;
N web processes let a member hold up to N times the limit (docs/security.md).
"""

from __future__ import annotations

import threading
from typing import Any

from ..conf import jobs_settings
from ..permissions import is_operator

#: The ``Retry-After`` of a refused stream, in seconds: a stream's end cannot be foreseen.
RETRY_AFTER = 10
#: The WebSocket close code of a refused socket (4000 + the HTTP status).
REFUSED_CODE = 4429

_lock = threading.Lock()
_open: dict[Any, int] = {}


class StreamSlot:
    """One open stream's place in its user's count; ``release`` is safe to call twice."""

    def __init__(self, user_pk: Any) -> None:
        self.user_pk = user_pk
        self.released = False

    def release(self) -> None:
        with _lock:
            if self.released:
                return
            self.released = True
            if self.user_pk is None:
                return
            left = _open.get(self.user_pk, 0) - 1
            if left > 0:
                _open[self.user_pk] = left
            else:
                _open.pop(self.user_pk, None)


def open_stream(user: Any) -> StreamSlot | None:
    """A slot for one more stream of ``user``, or ``None`` when they hold the limit already."""
    limit = jobs_settings.MAX_STREAMS_PER_USER
    if not limit or is_operator(user):
        return StreamSlot(None)
    with _lock:
        held = _open.get(user.pk, 0)
        if held >= limit:
            return None
        _open[user.pk] = held + 1
    return StreamSlot(user.pk)


def open_streams(user_pk: Any) -> int:
    """How many counted streams ``user_pk`` holds open in this process."""
    with _lock:
        return _open.get(user_pk, 0)


def refusal_message() -> str:
    limit = jobs_settings.MAX_STREAMS_PER_USER
    return (
        f"You have {limit} live event streams open already, the most one user may hold "
        '(JOBS["MAX_STREAMS_PER_USER"]). Close one (another tab or window) and connect again; '
        "one stream carries every event of your jobs."
    )
