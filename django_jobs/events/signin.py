"""Is the user who opened a stream still signed in, in the same role? Both transports ask it
while they run.

A stream outlives the request that opened it. When its user signs out (the session is
deleted or flushed), is deactivated, or changes password (the session's hash no longer
matches), the stream must stop; and a stream opened on the operators' address (every job's
events) must stop when its user is no longer an operator (``JOBS["IS_OPERATOR"]`` answers
false: a permission or a group removed, superuser taken away). Every open SSE stream and
WebSocket asks again every ``RECHECK_EVERY`` seconds (a few indexed queries: the session row,
the user row, the user's permissions) and closes when the answer is no. That is the bound: a
stream delivers nothing more than ``RECHECK_EVERY`` seconds after its user's sign-in ended or
its operator's rights were taken away. The client connects again, and is then given the
address its user has now (their own jobs' events).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.http import HttpRequest

from ..permissions import is_operator

#: Seconds between two checks of an open stream's sign-in (docs/security.md).
RECHECK_EVERY = 5.0

#: What ``SignIn.ended`` answers: the sign-in ended; the operator's rights were taken away.
SIGNED_OUT = "signed-out"
NO_LONGER_OPERATOR = "no-longer-operator"


@dataclass(frozen=True, slots=True)
class SignIn:
    """How a stream's user signed in: enough to ask again later."""

    user_pk: Any
    #: The session's key; ``None`` for other credentials (HTTP Basic, a token...), which are
    #: sent with every request, so only the user's own state can be checked again.
    session_key: str | None
    #: The stream was given the operators' address (every job's events): it holds only while
    #: the user is still an operator.
    operator: bool = False

    def ended(self) -> str | None:
        """``None`` while this sign-in stands (as Django's ``get_user`` would decide now) in the
        role the stream was opened with; else why not: ``SIGNED_OUT`` or
        ``NO_LONGER_OPERATOR``."""
        user = self._user()
        if user is None:
            return SIGNED_OUT
        if self.operator and not is_operator(user):
            return NO_LONGER_OPERATOR
        return None

    def still_valid(self) -> bool:
        """Does this sign-in still stand, in the role the stream was opened with?"""
        return self.ended() is None

    def _user(self) -> Any:
        """The signed-in user, read again now; ``None`` when the sign-in no longer stands."""
        if self.session_key is not None:
            request = HttpRequest()
            engine = import_module(settings.SESSION_ENGINE)
            request.session = engine.SessionStore(self.session_key)
            user = get_user(request)
            ok = bool(user.is_authenticated) and user.pk == self.user_pk
            return user if ok else None
        model = get_user_model()
        found = model._default_manager.filter(pk=self.user_pk).first()
        return found if found is not None and getattr(found, "is_active", True) else None


def session_key_of(session: Any) -> str | None:
    """The key of a request's (or a WebSocket scope's) session, if it has one."""
    return getattr(session, "session_key", None) if session is not None else None
