"""Is the user who opened a stream still signed in? Both transports ask it while they run.

A stream outlives the request that opened it. When its user signs out (the session is
deleted or flushed), is deactivated, or changes password (the session's hash no longer
matches), the stream must stop: every open SSE stream and WebSocket asks again every
``RECHECK_EVERY`` seconds (one query or two: the session row, the user row) and closes when
the answer is no. That is the bound: a stream delivers nothing more than ``RECHECK_EVERY``
seconds after its user's sign-in ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.http import HttpRequest

#: Seconds between two checks of an open stream's sign-in (docs/security.md).
RECHECK_EVERY = 5.0


@dataclass(frozen=True, slots=True)
class SignIn:
    """How a stream's user signed in: enough to ask again later."""

    user_pk: Any
    #: The session's key; ``None`` for other credentials (HTTP Basic, a token...), which are
    #: sent with every request, so only the user's own state can be checked again.
    session_key: str | None

    def still_valid(self) -> bool:
        """Does this sign-in still stand (as Django's ``get_user`` would decide now)?"""
        if self.session_key is not None:
            request = HttpRequest()
            engine = import_module(settings.SESSION_ENGINE)
            request.session = engine.SessionStore(self.session_key)
            user = get_user(request)
            return bool(user.is_authenticated) and user.pk == self.user_pk
        model = get_user_model()
        found = model._default_manager.filter(pk=self.user_pk).first()
        return found is not None and getattr(found, "is_active", True)


def session_key_of(session: Any) -> str | None:
    """The key of a request's (or a WebSocket scope's) session, if it has one."""
    return getattr(session, "session_key", None) if session is not None else None
