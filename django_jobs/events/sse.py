"""``GET events/``: the caller's live job events as Server-Sent Events (SPEC §8).

The view takes no setting. It signs the caller in (the session, else the API's
authenticators), picks the caller's one channel (``jobs-operators`` for operators,
``jobs-user-<pk>`` for a member), reads what the request may carry, and hands over to
``streams.stream``. What a request may carry is exactly what docs/events.md lists: the
``Last-Event-ID`` header or the ``lastEventId`` query parameter, each ``<channel>:<id>`` as the
stream sent it, and ``job``, the id of the one job to follow (its events and its children's;
404 unless the caller may see that job). Anything else (django-eventstream's own ``es-meta``,
``recover``, ``link``, ``channel``...) is a 400 that says so.

``JobsChannelManager`` and ``JobEventStorage`` remain for projects whose settings name them;
the job streams no longer need them (see their docstrings).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django_eventstream.channelmanager import DefaultChannelManager
from django_eventstream.storage import DjangoModelStorage
from rest_framework.exceptions import Throttled

from ..throttling import credentials_user, retry_after_header
from .fanout import sse_uses_redis
from .payloads import (
    JOB_ID,
    JOB_PARAMETER,
    OPERATORS_CHANNEL,
    JobFollow,
    channel_for_user,
    is_jobs_channel,
    may_follow,
)
from .quota import RETRY_AFTER, StreamSlot, open_stream, refusal_message
from .redis_sse import ensure_subscription
from .relay import relay
from .signin import SignIn, session_key_of
from .streams import stream

#: The query parameters the stream reads.
QUERY_PARAMETERS = ("lastEventId", JOB_PARAMETER)
#: An event id as the stream sends it: ``<channel>:<row id>``.
EVENT_ID = re.compile(r"(?:jobs-operators|jobs-user-[^\s:,]{1,64}):(\d{1,18})")


class InvalidStreamRequest(ValueError):
    """The request carries something the stream does not accept; ``errors`` says what."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


def last_event_id(request: HttpRequest) -> int | None:
    """The id to resume after (``Last-Event-ID``, else ``?lastEventId=``), or ``None``.

    Raises ``InvalidStreamRequest`` for any query parameter but ``lastEventId`` and ``job``,
    for an id that is not ``<channel>:<number>`` and for a ``job`` that is not a job id.
    """
    return stream_query(request)[0]


def stream_query(request: HttpRequest) -> tuple[int | None, int | None]:
    """What the request asks of the stream: the event id to resume after (or ``None``) and
    the job to follow (or ``None``: every event of the caller). ``InvalidStreamRequest``
    names every part it does not accept (see ``last_event_id``)."""
    unknown = sorted(set(request.GET) - set(QUERY_PARAMETERS))
    errors: dict[str, list[str]] = {
        name: ["Unknown parameter: the stream reads only lastEventId and job."] for name in unknown
    }
    jobs = request.GET.getlist(JOB_PARAMETER)
    if len(jobs) > 1:
        errors[JOB_PARAMETER] = ["Send job once: a stream follows one job."]
    elif jobs and JOB_ID.fullmatch(jobs[0]) is None:
        errors[JOB_PARAMETER] = [
            "Not a job id: send job=<id> (a positive whole number, as the API gives it) to "
            "follow one job, or leave it out for all of your jobs."
        ]
    values = request.GET.getlist("lastEventId")
    if len(values) > 1:
        errors["lastEventId"] = ["Send lastEventId once."]
    header = request.headers.get("Last-Event-ID")
    source, value = ("Last-Event-ID", header) if header else ("lastEventId", next(iter(values), ""))
    found = EVENT_ID.fullmatch(value) if value else None
    if value and found is None:
        errors[source] = [
            "Not an event id of this stream: send the id: of the last event received, "
            "'<channel>:<number>' (e.g. 'jobs-user-7:1532'), or nothing to start afresh."
        ]
    if errors:
        raise InvalidStreamRequest(errors)
    after = int(found.group(1)) if found is not None else None
    return after, int(jobs[0]) if jobs else None


def signed_in_user(request: HttpRequest) -> tuple[Any, SignIn] | None:
    """The caller and how they signed in: the session's user, else whoever the API's
    authenticators recognise in the ``Authorization`` header; ``None`` if anonymous.

    Raises ``Throttled`` when the address has spent its budget of refused credentials
    (``JOBS["AUTH_FAILURE_RATE"]``, as on the API)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return user, SignIn(user.pk, session_key_of(getattr(request, "session", None)))
    if "HTTP_AUTHORIZATION" not in request.META:
        return None
    user = credentials_user(request)  # refused credentials are a 401 like none
    if user is None or not user.is_authenticated:
        return None
    return user, SignIn(user.pk, None)


def throttled(exc: Throttled) -> HttpResponse:
    """429 for an address past its budget of refused credentials (the API's answer)."""
    response = JsonResponse({"code": "THROTTLED", "message": str(exc.detail)}, status=429)
    response["Retry-After"] = retry_after_header(exc)
    return response


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


def invalid(errors: dict[str, list[str]]) -> HttpResponse:
    return JsonResponse(
        {
            "code": "INVALID_STREAM_REQUEST",
            "message": "The event stream accepts only a Last-Event-ID header or a lastEventId "
            "query parameter, each '<channel>:<number>' as the stream sent it, and a job "
            "query parameter, the id of one job to follow; leave out everything else.",
            "errors": errors,
        },
        status=400,
    )


def job_not_found() -> HttpResponse:
    """The answer for a job the caller may not follow, or that does not exist: the same, so
    ids cannot be probed (as the API's 404)."""
    return JsonResponse(
        {
            "code": "NOT_FOUND",
            "message": "No job has this id, or it is not yours. GET the job list to see yours.",
        },
        status=404,
    )


def needs_asgi() -> HttpResponse:
    """501 for a stream asked of a WSGI server (SPEC §8): it would hold a worker thread and
    send nothing. The message names the project's ASGI application as ``startproject`` makes
    it (``mysite.asgi.application`` beside ``WSGI_APPLICATION``'s ``mysite.wsgi.application``)."""
    wsgi = getattr(settings, "WSGI_APPLICATION", None) or ""
    project = wsgi.removesuffix(".wsgi.application") if wsgi.endswith(".wsgi.application") else ""
    module = f"{project or 'mysite'}.asgi"
    return JsonResponse(
        {
            "code": "ASGI_REQUIRED",
            "message": "Live events need an ASGI server, and this request came through WSGI. "
            f"Serve the project with daphne or uvicorn (daphne {module}:application), or, for "
            'runserver, put "daphne" first in INSTALLED_APPS and set '
            f'ASGI_APPLICATION = "{module}.application".',
        },
        status=501,
    )


def too_many_streams() -> HttpResponse:
    response = JsonResponse({"code": "TOO_MANY_STREAMS", "message": refusal_message()}, status=429)
    response["Retry-After"] = str(RETRY_AFTER)
    return response


async def _holding(slot: StreamSlot, content: AsyncIterator[str]) -> AsyncIterator[str]:
    """``content``, giving the stream's slot back when it ends."""
    try:
        async for part in content:
            yield part
    finally:
        slot.release()


# It changes nothing: another method than GET is the JSON 405 below, not the CSRF check's page.
@csrf_exempt
def events(request: HttpRequest) -> HttpResponseBase:
    """``GET events/``: the caller's live job events as Server-Sent Events (SPEC §8)."""
    if request.method != "GET":
        refused = JsonResponse(
            {"code": "METHOD_NOT_ALLOWED", "message": "The event stream answers GET only."},
            status=405,
        )
        refused["Allow"] = "GET"
        return refused
    try:
        signed_in = signed_in_user(request)
    except Throttled as exc:
        return throttled(exc)
    if signed_in is None:
        return unauthenticated()
    user, sign_in = signed_in
    try:
        after, job_id = stream_query(request)
    except InvalidStreamRequest as exc:
        return invalid(exc.errors)
    if isinstance(request, WSGIRequest):  # a WSGI server: a stream would hang, say why instead
        return needs_asgi()
    follow = None
    if job_id is not None:
        if not may_follow(user, job_id):
            return job_not_found()
        follow = JobFollow(job_id)
    channel = channel_for_user(user)
    assert channel is not None
    sign_in = replace(sign_in, operator=channel == OPERATORS_CHANNEL)  # re-checked while open
    slot = open_stream(user)
    if slot is None:
        return too_many_streams()
    if sse_uses_redis():
        content: Any = ensure_subscription(stream(channel, after, sign_in, follow))
    else:
        relay.ensure_started()
        content = stream(channel, after, sign_in, follow)
    response = StreamingHttpResponse(_holding(slot, content), content_type="text/event-stream")
    # Also when the body never starts: the server closes every response it sent.
    response._resource_closers.append(slot.release)  # type: ignore[attr-defined]
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


class JobsChannelManager(DefaultChannelManager):
    """For projects whose ``EVENTSTREAM_CHANNELMANAGER_CLASS`` names it: eventstream's default
    manager, refusing the job channels' names on eventstream's own views (the job streams are
    served by ``events`` alone; nothing is ever sent to eventstream on those channels)."""

    def can_read_channel(self, user: Any, channel: str) -> bool:
        if is_jobs_channel(channel):
            return False
        return super().can_read_channel(user, channel)


class JobEventStorage(DjangoModelStorage):
    """For projects whose ``EVENTSTREAM_STORAGE_CLASS`` names it: eventstream's
    ``DjangoModelStorage`` (the job streams read the event rows themselves)."""
