"""What every view of the API shares: JSON only, JSON errors, deny by default.

``JobsAPIMixin`` is mixed into each viewset: it names the permission rules of each action
(``action_permissions``), answers 405 for a method a path does not serve before credentials are
read, challenges anonymous callers without a browser prompt and throttles members' writes. The
helpers here turn the engine's refusals into the API's errors and keep a member to their rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, NoReturn

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed, MethodNotAllowed
from rest_framework.pagination import BasePagination
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.throttling import BaseThrottle

from ...exceptions import InvalidPayload, PayloadTooLarge
from ...permissions import is_operator
from ...throttling import accepted_credentials, check_failed_credentials
from ..errors import InvalidRequestError, NotFoundError, TooLargeError, exception_handler
from ..openapi import AutoSchema
from ..pagination import JobsPagination
from ..parsers import BoundedJSONParser, check_content_length, check_json_body
from ..permissions import DenyAll, IsSignedIn
from ..throttles import MemberRateThrottle, member_throttled

#: The challenge sent with 401 when no configured authenticator offers one a browser ignores.
FALLBACK_CHALLENGE = 'Session realm="api"'
#: Challenges a browser answers with its own sign-in prompt, whose credentials it then caches
#: and sends with any later request to the site, a cross-site form's included: never sent.
PROMPTING_SCHEMES = frozenset({"basic", "digest", "negotiate", "ntlm"})
#: The methods whose body must be JSON, even an empty one: a cross-site form or beacon can
#: send a POST with no other type (DELETE and PATCH need a CORS preflight a browser would ask).
JSON_ONLY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class JobsAPIMixin:
    """Policies shared by every view of the API: JSON only, JSON errors, deny by default."""

    renderer_classes: Sequence[type[BaseRenderer]] = [JSONRenderer]
    parser_classes: Sequence[type[BaseParser]] = [BoundedJSONParser]
    pagination_class: type[BasePagination] | None = JobsPagination
    # drf-spectacular's, whatever REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] says: GET schema/
    # needs no global setting (SPEC §2).
    schema: ViewInspector | None = AutoSchema()
    http_method_names: Sequence[str] = ["get", "post", "patch", "delete", "head"]
    #: action name -> rules beyond "signed in". An action missing here is refused.
    action_permissions: ClassVar[dict[str, tuple[type[BasePermission], ...]]] = {}

    def get_permissions(self) -> list[BasePermission]:
        request = self.request  # type: ignore[attr-defined]
        action_name = getattr(self, "action", None)
        if action_name is None or request.method.lower() not in self.http_method_names:
            return [IsSignedIn()]  # no handler: refused with 405 before (perform_authentication)
        rules = self.action_permissions.get(action_name)
        if rules is None:
            return [IsSignedIn(), DenyAll()]
        return [IsSignedIn(), *(rule() for rule in rules)]

    def get_exception_handler(self) -> Any:
        return exception_handler

    #: The actions that add work, throttled for members (``JOBS["MEMBER_RATE"]``).
    throttled_actions: ClassVar[frozenset[str]] = frozenset({"create"})

    def get_authenticate_header(self, request: Request) -> str:
        # DRF asks only the first authenticator; with SessionAuthentication first that yields
        # no challenge and DRF turns 401 into 403. Anonymous callers get 401 here, with a
        # challenge no browser prompts for: Basic credentials are for clients that send them
        # up front (docs/security.md).
        for authenticator in self.get_authenticators():  # type: ignore[attr-defined]
            header = authenticator.authenticate_header(request)
            if header and header.split(None, 1)[0].lower() not in PROMPTING_SCHEMES:
                return header
        return FALLBACK_CHALLENGE

    def perform_authentication(self, request: Request) -> None:
        # A method the path does not serve is a 405 for anyone, whatever the body: refused
        # before credentials are checked, since a session's CSRF check reads the body (a
        # POST's form field) and would refuse a body that is not JSON with 415 first.
        method = request.method or ""
        if not self._serves(method):
            raise MethodNotAllowed(method)
        if "HTTP_AUTHORIZATION" not in request.META:
            request.user  # noqa: B018 - authenticates (a session, or nobody)
            return
        check_failed_credentials(request)  # takes a unit of the refusals' budget
        refused = False
        try:
            request.user  # noqa: B018 - authenticates
        except AuthenticationFailed:
            refused = True  # the unit stays spent
            raise
        finally:
            if not refused:
                accepted_credentials(request)

    def get_throttles(self) -> list[BaseThrottle]:
        throttles: list[BaseThrottle] = list(super().get_throttles())  # type: ignore[misc]
        if getattr(self, "action", None) in self.throttled_actions:
            throttles.append(MemberRateThrottle())
        return throttles

    def throttled(self, request: Request, wait: float | None) -> NoReturn:
        raise member_throttled(wait)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        if request.method in JSON_ONLY_METHODS:
            check_json_body(request)
            check_content_length(request.META)

    def _serves(self, method: str) -> bool:
        name = method.lower()
        return name in self.http_method_names and hasattr(self, name)

    def get_int_pk(self) -> int:
        raw = self.kwargs.get("pk")  # type: ignore[attr-defined]
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = -1
        if value < 1 or str(value) != str(raw):
            raise NotFoundError(f"{raw!r} is not an id: ids are positive whole numbers.")
        return value


def user_rows(queryset: Any, user: Any) -> Any:
    """All rows for operators; a member's own rows otherwise."""
    return queryset if is_operator(user) else queryset.filter(owner_id=user.pk)


def too_large(exc: PayloadTooLarge) -> TooLargeError:
    """The payload-size refusal (``validation.check_payload_size``) as the API's 413."""
    return TooLargeError(exc.message, code="PAYLOAD_TOO_LARGE")


def payload_error(exc: InvalidPayload) -> InvalidRequestError:
    errors = exc.errors if exc.errors is not None else [exc.message]
    return InvalidRequestError(
        "The payload is invalid for this kind: fix the fields listed in errors.payload and "
        "submit again.",
        code="INVALID_PAYLOAD",
        errors={"payload": errors},
    )


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """JSON 404 for a path under the API that no route serves."""
    return JsonResponse(
        {
            "code": "NOT_FOUND",
            "message": "No API path matches this URL. GET schema/ lists the paths; ids are "
            "positive whole numbers.",
        },
        status=404,
    )
