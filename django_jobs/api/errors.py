"""Every API error is JSON ``{"code", "message"}`` (plus ``"errors"`` for field errors).

The message says what to do next. The handler is set on the API's views, so the project's own
``REST_FRAMEWORK["EXCEPTION_HANDLER"]`` keeps serving the project's other APIs.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class APIError(exceptions.APIException):
    """An API refusal with a stable ``code`` and a message that says what to do next."""

    status_code: int = status.HTTP_400_BAD_REQUEST
    code = "BAD_REQUEST"
    message = "The request cannot be served."

    def __init__(
        self, message: str | None = None, *, errors: Any = None, code: str | None = None
    ) -> None:
        self.message = message or self.message
        self.code = code or self.code
        self.errors = errors
        super().__init__(detail=self.message, code=self.code)

    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.errors is not None:
            data["errors"] = self.errors
        return data


class InvalidRequestError(APIError):
    status_code = status.HTTP_400_BAD_REQUEST
    code = "INVALID"
    message = "The request is invalid: fix the fields listed in errors and send it again."


class KindNotAllowedError(APIError):
    """One body for a kind that does not exist and for one the caller may not use."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "KIND_NOT_ALLOWED"
    message = (
        "This kind does not exist or you may not use it. GET kinds/ lists the kinds you may "
        "submit; ask an operator if you need another one."
    )


class UnknownKindError(APIError):
    """An operator's unknown kind: operators see every kind, so the known ones are named."""

    status_code = status.HTTP_400_BAD_REQUEST
    code = "UNKNOWN_KIND"

    def __init__(self, kind: str, known: list[str]) -> None:
        message = (
            f"No job is registered under kind {kind!r}. Known kinds: "
            f"{', '.join(known) or '(none)'}. Check the spelling, or define it with "
            f"@job({kind!r}, ...) in an installed app's jobs.py (GET kinds/ describes each)."
        )
        super().__init__(message, errors={"kind": [message]})


class OperatorOnlyFieldError(APIError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "OPERATOR_ONLY_FIELD"
    message = "Only operators may set priority or queue. Leave them out to use the kind's own."


class OperatorOnlyFilterError(APIError):
    """A member searched by a filter only operators may use (``worker``)."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "OPERATOR_ONLY_FILTER"
    message = "Only operators may search by worker. Leave the worker filter out."


class RetryNotAllowedError(APIError):
    """A retry the caller may not make: from a step, for anyone but an operator."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "RETRY_NOT_ALLOWED"


class NotFoundError(APIError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "NOT_FOUND"
    message = "Nothing is here, or it is not yours to see. Check the id in the path."


class ConflictError(APIError):
    status_code = status.HTTP_409_CONFLICT
    code = "CONFLICT"


class TooLargeError(APIError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "TOO_LARGE"


# DRF's own exceptions, reworded: code and what to do next.
_MESSAGES: list[tuple[type[Exception], str, str]] = [
    (
        exceptions.NotAuthenticated,
        "NOT_AUTHENTICATED",
        "Sign in first: send credentials this API accepts, such as the session cookie of a "
        "signed-in user or HTTP Basic credentials.",
    ),
    (
        exceptions.AuthenticationFailed,
        "AUTHENTICATION_FAILED",
        "The credentials were refused ({detail}). Check the username and password, or sign in "
        "again.",
    ),
    (
        exceptions.PermissionDenied,
        "FORBIDDEN",
        "{detail} Ask an operator if you need this.",
    ),
    (
        exceptions.NotFound,
        "NOT_FOUND",
        "{detail}",
    ),
    (
        exceptions.MethodNotAllowed,
        "METHOD_NOT_ALLOWED",
        "{detail} The API reference (GET schema/) lists the methods of each path.",
    ),
    (
        exceptions.UnsupportedMediaType,
        "UNSUPPORTED_MEDIA_TYPE",
        "{detail} Send the body as JSON with Content-Type: application/json.",
    ),
    (
        exceptions.ParseError,
        "MALFORMED_BODY",
        "The body is not valid JSON ({detail}). Send one JSON object.",
    ),
    (
        exceptions.NotAcceptable,
        "NOT_ACCEPTABLE",
        "This API answers in JSON only: send Accept: application/json.",
    ),
    (
        exceptions.Throttled,
        "THROTTLED",
        "{detail} Wait and send the request again.",
    ),
]

NOT_FOUND_MESSAGE = "Nothing is here, or it is not yours to see. Check the id in the path."


def error_body(exc: Exception, response: Response) -> dict[str, Any]:
    if isinstance(exc, APIError):
        return exc.body()
    if isinstance(exc, exceptions.ValidationError):
        return {
            "code": "INVALID",
            "message": InvalidRequestError.message,
            "errors": _as_field_errors(response.data),
        }
    if isinstance(exc, Http404):
        return {"code": "NOT_FOUND", "message": NOT_FOUND_MESSAGE}
    if isinstance(exc, DjangoPermissionDenied):
        return {"code": "FORBIDDEN", "message": "You may not do this. Ask an operator."}
    detail = _detail_text(response.data)
    if isinstance(exc, exceptions.PermissionDenied) and detail.startswith("CSRF Failed"):
        return {
            "code": "CSRF_FAILED",
            "message": f"{detail} Signed in by session, send the CSRF token in the X-CSRFToken "
            "header (from the csrftoken cookie), or use another authentication.",
        }
    for klass, code, template in _MESSAGES:
        if isinstance(exc, klass):
            if klass is exceptions.NotFound and detail in ("", "Not found."):
                return {"code": code, "message": NOT_FOUND_MESSAGE}
            if klass is exceptions.NotFound:
                return {"code": code, "message": f"{detail} {NOT_FOUND_MESSAGE}"}
            return {"code": code, "message": template.format(detail=detail).strip()}
    code = getattr(exc, "default_code", "error")
    return {"code": str(code).upper(), "message": detail or "The request cannot be served."}


def _detail_text(data: Any) -> str:
    if isinstance(data, dict) and "detail" in data:
        return str(data["detail"])
    return str(data) if data else ""


def _as_field_errors(data: Any) -> dict[str, Any]:
    if isinstance(data, dict):
        return data
    return {"non_field_errors": data if isinstance(data, list) else [str(data)]}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler (status, headers such as WWW-Authenticate), with our JSON body."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    response.data = error_body(exc, response)
    return response
