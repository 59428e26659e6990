"""A job event as JSON, and who it is addressed to.

One schema for both transports: an SSE event's ``data`` and a WebSocket frame are the same
text, ``{"type", "job": <job JSON without payload/result>, "at"}``, plus ``"line"`` for
``job.log``. The text is made once, when the event happens, and stored as is (the job row
changes afterwards; the event keeps what was true then).

Addresses: an event about a job reaches its owner and operators; an event about a job with
no owner reaches operators only. Operators listen on one address that carries every event,
so an operator who owns a job hears each of its events once.
"""

from __future__ import annotations

from datetime import datetime
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder

from ..permissions_util import is_operator
from ..serialize import job_json

if TYPE_CHECKING:
    from ..models import Job

EVENT_TYPES: tuple[str, ...] = (
    "job.created",
    "job.started",
    "job.progress",
    "job.log",
    "job.waiting",
    "job.succeeded",
    "job.failed",
    "job.blocked",
    "job.cancelled",
    "job.retrying",
)

#: django-eventstream channels (SSE): every event, and one user's events.
OPERATORS_CHANNEL = "jobs-operators"
USER_CHANNEL_PREFIX = "jobs-user-"
#: Channels layer groups (WebSocket), the same two addresses.
OPERATORS_GROUP = "django_jobs.operators"
USER_GROUP_PREFIX = "django_jobs.user."
#: The Channels message type of a relayed event; ``JobEventsConsumer.jobs_event`` handles it.
WS_MESSAGE_TYPE = "jobs.event"


def event_data(event_type: str, job: Job, at: datetime, line: str | None = None) -> dict[str, Any]:
    """The event as a dict: ``type``, ``job`` (no payload, no result), ``at`` and maybe ``line``."""
    data: dict[str, Any] = {
        "type": event_type,
        "job": job_json(job, payload=False),
        "at": at.isoformat(),
    }
    if event_type == "job.log":
        data["line"] = line
    return data


def snapshot(job: Job) -> Job:
    """A copy of ``job`` as it is now, cheap to take (its fields, not its related objects):
    the event's JSON is made from it later, off the publishing thread."""
    copy = type(job).__new__(type(job))
    copy.__dict__.update(job.__dict__)
    return copy


# One encoder for every event (it keeps no state between calls): json.dumps(cls=...) would
# build one per call.
_ENCODER = DjangoJSONEncoder(separators=(",", ":"))


def encode(data: dict[str, Any]) -> str:
    """The wire text of an event (compact JSON)."""
    return _ENCODER.encode(data)


def event_text(event_type: str, job: Job, at: datetime, line: str | None = None) -> str:
    """``encode(event_data(...))``, written directly: the worker makes two or more per job.

    It must give the very same text; a property test holds it to that. A change to
    ``job_json`` is a change here too.
    """
    state = job.state
    progress = job.progress or {}
    error = job.error if state in ("failed", "blocked", "unknown") else None
    wait_reason = job.wait_reason if state == "waiting" else None
    text = (
        f'{{"type":{_value(event_type)},"job":{{"id":{_value(job.pk)},'
        f'"kind":{_value(job.kind)},"queue":{_value(job.queue)},"engine":{_value(job.engine)},'
        f'"state":{_value(state)},"owner":{_value(job.owner_id)},"tenant":{_value(job.tenant)},'
        f'"priority":{_value(job.priority)},"attempts":{_value(job.attempts)},'
        f'"max_attempts":{_value(job.max_attempts)},'
        f'"progress":{{"stage":{_value(progress.get("stage"))},'
        f'"percent":{_value(progress.get("percent"))}}},'
        f'"error":{_value(error)},"wait_reason":{_value(wait_reason)},'
        f'"run_at":{_instant(job.run_at)},"created_at":{_instant(job.created_at)},'
        f'"started_at":{_instant(job.started_at)},"ended_at":{_instant(job.ended_at)},'
        f'"timestamps_derived":{_value(job.timestamps_derived)},'
        f'"idempotency_key":{_value(job.idempotency_key)}}},"at":"{at.isoformat()}"'
    )
    if event_type == "job.log":
        return f'{text},"line":{_value(line)}}}'
    return text + "}"


def _value(value: Any) -> str:
    # The JSON of one value, as _ENCODER writes it; the common types without its machinery.
    if value is None:
        return "null"
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    return _ENCODER.encode(value)


def _instant(value: datetime | None) -> str:
    return "null" if value is None else f'"{value.isoformat()}"'


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


def may_read_channel(user: Any, channel: str) -> bool:
    """May ``user`` read this jobs channel? Operators read every one; a member only their own."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if is_operator(user):
        return True
    return channel == user_channel(str(user.pk))
