"""The schema's shared parts: the error answers the operations list, and the shapes of the
filters and path parameters the views read."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from ... import operations, search
from ..serializers import ErrorSerializer, JobSerializer

#: Text without control characters (``validation.check_label``), as a schema pattern.
NO_CONTROL_CHARACTERS = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"
#: A filter on a label (``kind``, ``queue``) as the schema describes it: the API refuses an
#: empty one (``?kind=``, or only spaces, which are trimmed) and control characters
#: (``JobFilterSerializer``).
LABEL_FILTER = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "pattern": (
        "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f]"
        "[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    ),
}


def _search_text(limit: int) -> dict[str, object]:
    """A search filter's text as the schema describes it (``django_jobs.search``): not blank,
    no control characters, at most ``limit`` characters."""
    return {**LABEL_FILTER, "maxLength": limit}


#: The job list's search filters besides ``payload.<path>`` (which the operation's description
#: documents: OpenAPI has no parameter whose name is a pattern).
SEARCH_PARAMETERS = [
    OpenApiParameter(
        "error",
        _search_text(search.MAX_TEXT),
        description="The error contains this text, ignoring case. Operators search the whole "
        "error (its traceback too); members what they are shown of it.",
    ),
    OpenApiParameter(
        "created_after",
        _search_text(search.MAX_TEXT),
        description="Created at or after: ISO 8601 (`2026-12-07T08:00:00+00:00`; without an "
        "offset, in the server's time zone) or a duration back from now (`30m`, `1h`, `7d`).",
    ),
    OpenApiParameter(
        "created_before",
        _search_text(search.MAX_TEXT),
        description="Created before: as `created_after`.",
    ),
    OpenApiParameter(
        "worker",
        _search_text(search.MAX_WORKER),
        description="Operators only (403 for members): jobs whose last attempt was claimed by "
        "the worker of this name (GET workers/).",
    ),
]


#: A queue's name in a path, as ``operations`` checks it.
QUEUE_NAME = OpenApiParameter(
    "name",
    {
        "type": "string",
        "minLength": 1,
        "maxLength": operations.QUEUE_NAME_MAX,
        "pattern": NO_CONTROL_CHARACTERS,
    },
    OpenApiParameter.PATH,
    description="The queue's name (GET queues/ lists them).",
)


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


E400 = _error("Invalid request: `errors` lists the fields to fix.")
E401 = _error("Not signed in.")
E403 = _error("Not allowed (or, signed in by session, the CSRF token is missing).")
E404 = _error("No such object, or not yours.")
E409 = _error("The object's state does not allow this.")
E413 = _error("The body or the payload is too large.")
E415 = _error("The body is not sent as JSON (Content-Type: application/json), even empty.")
#: What cancel and retry answer: the job, or why not.
JOB_ACTION_RESPONSES = {
    200: JobSerializer,
    400: E400,
    401: E401,
    403: E403,
    404: E404,
    409: E409,
    415: E415,
}
E429 = _error(
    "Throttled: a member's submits, retries and schedule creations past "
    'JOBS["MEMBER_RATE"], or refused credentials past JOBS["AUTH_FAILURE_RATE"]: see '
    "Retry-After."
)
