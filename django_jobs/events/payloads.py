"""A job event as JSON, and who it is addressed to.

One schema for both transports: an SSE event's ``data`` and a WebSocket frame are the same
text, ``{"type", "job": <job JSON without payload/result>, "at"}``, plus ``"line"`` for
``job.log``. The text is made once, when the event happens, and stored as is (the job row
changes afterwards; the event keeps what was true then).

Two views (``django_jobs.serialize``): the stored text is the operator's; a member (the job's
owner) receives ``member_text`` of it, the same event without the server's traceback and
without the operators' fields (``worker``). The text is chosen per address on delivery, live
and on replay, over SSE and WebSocket alike.

Addresses: an event about a job reaches its owner and operators; an event about a job with
no owner reaches operators only. Operators listen on one address that carries every event,
so an operator who owns a job hears each of its events once.

One job's stream (``?job=ID``, SPEC §8) listens on its reader's address and keeps only that
job's events and its children's (``JobFollow``), for whoever may see the job (``may_follow``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..permissions import is_operator
from ..serialize import (  # noqa: F401 - event_data and event_text: this module's names too
    encode,
    event_data,
    event_text,
    member_may_differ,
    member_view,
    without_operators_fields,
)

#: django-eventstream channels (SSE): every event, and one user's events.
OPERATORS_CHANNEL = "jobs-operators"
USER_CHANNEL_PREFIX = "jobs-user-"
#: Channels layer groups (WebSocket), the same two addresses.
OPERATORS_GROUP = "django_jobs.operators"
USER_GROUP_PREFIX = "django_jobs.user."
#: The Channels message type of a relayed event; ``JobEventsConsumer.jobs_event`` handles it.
WS_MESSAGE_TYPE = "jobs.event"


def member_text(text: str) -> str:
    """The event text a job's owner receives, from the stored (operator's) text.

    The same ``member_view`` as the API's. The operators' fields are cut out of the text (a
    running job's events all name its worker); the text is parsed only when the member's view
    could differ further (an event whose error carries a traceback).
    """
    text = without_operators_fields(text)
    if not member_may_differ(text):
        return text
    data = json.loads(text)
    data["job"] = member_view(data["job"])
    return encode(data)


def text_for_channel(text: str, channel: str) -> str:
    """The text of an event as delivered on ``channel``: operators' in full, a member's view."""
    return text if channel == OPERATORS_CHANNEL else member_text(text)


def text_for_group(text: str, group: str) -> str:
    """The text of an event as delivered to a Channels ``group`` (see ``text_for_channel``)."""
    return text if group == OPERATORS_GROUP else member_text(text)


def owner_key(owner_id: Any) -> str | None:
    """How an owner is stored on an event row and named in addresses: its pk as text."""
    return None if owner_id is None else str(owner_id)


def sse_channels(owner: str | None) -> list[str]:
    """The eventstream channels an event reaches: operators', and its owner's if it has one."""
    return [OPERATORS_CHANNEL] if owner is None else [OPERATORS_CHANNEL, user_channel(owner)]


def ws_groups(owner: str | None) -> list[str]:
    """The Channels groups an event reaches: operators', and its owner's if it has one."""
    return [OPERATORS_GROUP] if owner is None else [OPERATORS_GROUP, USER_GROUP_PREFIX + owner]


def user_channel(owner: str) -> str:
    return USER_CHANNEL_PREFIX + owner


def channel_owner(channel: str) -> str | None:
    """The owner a user channel belongs to; ``None`` for the operators' channel."""
    if channel.startswith(USER_CHANNEL_PREFIX):
        return channel[len(USER_CHANNEL_PREFIX) :]
    return None


def is_jobs_channel(channel: str) -> bool:
    return channel == OPERATORS_CHANNEL or channel.startswith(USER_CHANNEL_PREFIX)


def channel_for_user(user: Any) -> str | None:
    """The one SSE channel a signed-in user listens on; ``None`` for anonymous."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return OPERATORS_CHANNEL if is_operator(user) else user_channel(str(user.pk))


def group_for_user(user: Any) -> str | None:
    """The one Channels group a signed-in user's WebSocket joins; ``None`` for anonymous."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return OPERATORS_GROUP if is_operator(user) else USER_GROUP_PREFIX + str(user.pk)


#: The query parameter naming the one job a stream follows, and what its value must be: a
#: job id as the API writes it (a positive whole number, no sign, no leading zero).
JOB_PARAMETER = "job"
JOB_ID = re.compile(r"[1-9][0-9]{0,17}")


class JobFollow:
    """Which events one job's stream carries: the job's own and its children's.

    A child's events are known by their job JSON's ``parent`` (every event of a child carries
    it), so a child spawned after the stream opened is followed too; the ids seen are kept,
    so only a child's first event is parsed. Replay reads the same set from the rows
    (``store.events.after(job=...)``).
    """

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.ids = {job_id}
        # In the compact job JSON a key's quotes are bare: inside a string they are escaped.
        self._marker = f'"parent":{job_id}'

    def wants(self, job_id: int, text: str) -> bool:
        """Is the event of ``job_id`` with this JSON ``text`` one this stream carries?"""
        if job_id in self.ids:
            return True
        if self._marker not in text:  # cheap: most events of other jobs stop here
            return False
        try:
            parent = json.loads(text)["job"]["parent"]
        except (ValueError, KeyError, TypeError):
            return False
        if parent != self.job_id:
            return False
        self.ids.add(job_id)
        return True


def may_follow(user: Any, job_id: int) -> bool:
    """May ``user`` follow job ``job_id``'s events? Operators any job; a member their own.

    A job that does not exist and another member's job give the same answer, so the streams
    answer both alike (404) and ids cannot be probed."""
    from ..conf import jobs_settings
    from ..models import Job

    if user is None or not getattr(user, "is_authenticated", False):
        return False
    jobs = Job.objects.using(jobs_settings.DATABASE).filter(pk=job_id)
    if not is_operator(user):
        jobs = jobs.filter(owner_id=user.pk)
    return jobs.exists()
