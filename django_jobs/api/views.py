"""The API's views: jobs, kinds, stats, schedules and the OpenAPI schema.

Every action names its permission rules in ``action_permissions``; an action without rules is
refused (``DenyAll``). Members only ever query their own rows, so another member's job or
schedule answers 404. State changes go through ``django_jobs.operations`` and admission.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, ClassVar, NoReturn

from django.core.signals import setting_changed
from django.db import transaction
from django.dispatch import receiver
from django.http import Http404, HttpRequest, JsonResponse
from django.utils import translation
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from drf_spectacular.views import SpectacularAPIView
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.pagination import BasePagination
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.throttling import BaseThrottle
from rest_framework.viewsets import GenericViewSet

from .. import __version__, clock, operations
from ..conf import jobs_settings
from ..engine import schedules
from ..exceptions import (
    InvalidDuration,
    InvalidPayload,
    InvalidSchedule,
    JobDuplicate,
    JobNotFound,
    NotCancellable,
    NotRetryable,
    PayloadTooLarge,
    RetryNotAllowed,
    ScheduleNotAllowed,
    UnknownEngine,
    UnknownKind,
    UnknownStep,
)
from ..models import Job, Schedule
from ..observability.stats import queue_stats
from ..permissions import can_submit, is_operator
from ..registry import all_handles, get
from ..serialize import (
    View,
    attach_children,
    job_detail_json,
    job_json,
    member_view,
    view_for,
)
from ..states import JobState
from ..throttling import accepted_credentials, check_failed_credentials
from ..validation import check_label, key_problem, storable_text
from .errors import (
    ConflictError,
    InvalidRequestError,
    KindNotAllowedError,
    NotFoundError,
    OperatorOnlyFieldError,
    RetryNotAllowedError,
    TooLargeError,
    UnknownKindError,
    exception_handler,
)
from .openapi import AutoSchema, extend_schema, extend_schema_view, schema_language
from .pagination import JobsPagination
from .parsers import BoundedJSONParser, check_content_length, check_json_body
from .permissions import CanRetryJob, DenyAll, IsOperator, IsSignedIn
from .serializers import (
    CancelSerializer,
    ErrorSerializer,
    JobDetailSerializer,
    JobSerializer,
    KindSerializer,
    PausedSerializer,
    PauseSerializer,
    QueueSerializer,
    ResumedSerializer,
    ResumeSerializer,
    RetrySerializer,
    ScheduleSerializer,
    StatsSerializer,
    SubmitSerializer,
    SubmittedJobSerializer,
    WorkerSerializer,
)
from .throttles import MemberRateThrottle, member_throttled

#: The challenge sent with 401 when no configured authenticator offers one a browser ignores.
FALLBACK_CHALLENGE = 'Session realm="api"'
#: Challenges a browser answers with its own sign-in prompt, whose credentials it then caches
#: and sends with any later request to the site, a cross-site form's included: never sent.
PROMPTING_SCHEMES = frozenset({"basic", "digest", "negotiate", "ntlm"})
#: The methods whose body must be JSON, even an empty one: a cross-site form or beacon can
#: send a POST with no other type (DELETE and PATCH need a CORS preflight a browser would ask).
JSON_ONLY_METHODS = frozenset({"POST", "PUT", "PATCH"})


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
            return [IsSignedIn()]  # no handler: signed-in callers get 405
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
        # A method the path does not serve is the 405 that follows, whatever its body.
        if request.method in JSON_ONLY_METHODS and self._serves(request.method):
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


def _utf8_header(value: str, name: str) -> str:
    """A header's text as the client sent it: WSGI and ASGI hand headers over as latin-1,
    so UTF-8 bytes arrive as one character per byte; bytes that are not UTF-8 are a 400."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise InvalidRequestError(
            errors={name: ["Send this header as UTF-8 text (or plain ASCII)."]}
        ) from None


def _user_rows(queryset: Any, user: Any) -> Any:
    """All rows for operators; a member's own rows otherwise."""
    return queryset if is_operator(user) else queryset.filter(owner_id=user.pk)


def _too_large(exc: PayloadTooLarge) -> TooLargeError:
    """The payload-size refusal (``validation.check_payload_size``) as the API's 413."""
    return TooLargeError(exc.message, code="PAYLOAD_TOO_LARGE")


def _payload_error(exc: InvalidPayload) -> InvalidRequestError:
    errors = exc.errors if exc.errors is not None else [exc.message]
    return InvalidRequestError(
        "The payload is invalid for this kind: fix the fields listed in errors.payload and "
        "submit again.",
        code="INVALID_PAYLOAD",
        errors={"payload": errors},
    )


class JobFilterSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=JobState.values, required=False)
    kind = serializers.CharField(required=False, max_length=200)
    queue = serializers.CharField(required=False, max_length=100)

    def to_internal_value(self, data: Any) -> Any:
        # A filter given empty (``?state=``) would be skipped as if absent: say so instead.
        names = ("state", "kind", "queue")
        empty = [name for name in names if hasattr(data, "getlist") and "" in data.getlist(name)]
        if empty:
            raise serializers.ValidationError(
                {name: ["Empty: give a value, or leave the filter out."] for name in empty}
            )
        return super().to_internal_value(data)

    def validate_kind(self, value: str) -> str:
        return _label(value, "kind")

    def validate_queue(self, value: str) -> str:
        return _label(value, "queue")


def _label(value: str, what: str) -> str:
    """A filter's text: no control character (NUL included), no lone surrogate."""
    try:
        return check_label(value, what=what)
    except InvalidPayload as exc:
        raise serializers.ValidationError(exc.message) from None


@extend_schema_view(
    list=extend_schema(
        operation_id="jobs_list",
        tags=["jobs"],
        summary="List jobs",
        description="Members see their own jobs, operators every job; newest first.",
        parameters=[
            OpenApiParameter("state", str, enum=JobState.values, description="Only this state."),
            OpenApiParameter("kind", str, description="Only this kind."),
            OpenApiParameter("queue", str, description="Only this queue."),
        ],
        responses={200: JobSerializer(many=True), 400: E400, 401: E401, 404: E404},
    ),
    create=extend_schema(
        operation_id="jobs_submit",
        tags=["jobs"],
        summary="Submit a job",
        description=(
            "Members submit member-safe kinds and may not set priority or queue; operators "
            "submit any kind. 201 with the new job, or 200 with `deduped: true` and the live "
            "job that holds the idempotency key. A kind that does not exist is, for a member, "
            "the same 403 `KIND_NOT_ALLOWED` as one they may not submit (kinds cannot be "
            "probed); for an operator, 400 `UNKNOWN_KIND` naming the known kinds."
        ),
        request=SubmitSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Same as the idempotency_key field.",
            )
        ],
        responses={
            201: SubmittedJobSerializer,
            200: SubmittedJobSerializer,
            400: E400,
            401: E401,
            403: E403,
            413: E413,
            415: E415,
            429: E429,
        },
    ),
    retrieve=extend_schema(
        operation_id="jobs_retrieve",
        tags=["jobs"],
        summary="A job with its steps and log",
        responses={200: JobDetailSerializer, 401: E401, 404: E404},
    ),
)
class JobViewSet(JobsAPIMixin, GenericViewSet):
    """Jobs: list, submit, inspect, cancel and retry; the kinds manifest and queue stats."""

    #: Submits and retries add work: both spend the member's rate (``JOBS["MEMBER_RATE"]``).
    throttled_actions: ClassVar[frozenset[str]] = frozenset({"create", "retry"})

    serializer_class = JobSerializer
    #: What makes a job's JSON large: a list page is bounded by their size (JobsPagination).
    page_bytes_of: ClassVar[list[str]] = ["payload", "result"]
    action_permissions: ClassVar[dict[str, tuple[type[BasePermission], ...]]] = {
        "list": (),
        "create": (),
        "retrieve": (),
        "cancel": (),
        "retry": (CanRetryJob,),
        "children": (),
        "kinds": (),
        "stats": (IsOperator,),
    }

    def get_queryset(self) -> Any:
        jobs = Job.objects.using(jobs_settings.DATABASE).order_by("-id")
        return _user_rows(jobs, self.request.user)

    def get_object(self) -> Job:
        queryset = self.get_queryset()
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("steps")
        try:
            job = queryset.get(pk=self.get_int_pk())
        except Job.DoesNotExist:
            raise NotFoundError(
                "No job has this id, or it is not yours. GET the job list to see yours."
            ) from None
        self.check_object_permissions(self.request, job)
        return job

    def list(self, request: Request) -> Response:
        filters = JobFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        jobs = self.get_queryset()
        for name, value in filters.validated_data.items():
            jobs = jobs.filter(**{name: value})
        return self._page_of(jobs)

    def _page_of(self, jobs: Any) -> Response:
        page = list(self.paginate_queryset(jobs) or ())  # None only without a paginator
        attach_children(page)  # one query for the page's parents, none without parents
        view = view_for(self.request.user)
        return self.get_paginated_response([job_json(job, view=view) for job in page])

    def create(self, request: Request) -> Response:
        body = SubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        data["idempotency_key"] = self._idempotency_key(request, data.get("idempotency_key"))
        user = request.user
        operator = is_operator(user)
        if not operator and (data.get("priority") is not None or data.get("queue") is not None):
            raise OperatorOnlyFieldError()
        handle = get(data["kind"])
        if handle is None and operator:  # operators see every kind: nothing to hide
            raise UnknownKindError(data["kind"], [h.kind for h in all_handles()])
        if not can_submit(user, handle):
            raise KindNotAllowedError()
        assert handle is not None
        if not operator and data.get("run_at") is not None and data["run_at"] < clock.now():
            data["run_at"] = None  # a member's past run_at is now: no jumping the queue
        payload = data.get("payload")
        # With OUTBOX "required" enqueue needs a transaction around it; otherwise it runs its
        # own short one, which also stores job.created with the job (so that event reaches
        # clients before job.started).
        atomic = (
            transaction.atomic(using=jobs_settings.DATABASE)
            if jobs_settings.OUTBOX == "required"
            else nullcontext()
        )
        try:
            with atomic:
                job = handle.as_user(
                    user,
                    payload,
                    queue=data.get("queue"),
                    priority=data.get("priority"),
                    run_at=data.get("run_at"),
                    delay=data.get("delay"),
                    idempotency_key=data["idempotency_key"],
                )
        except PayloadTooLarge as exc:
            raise _too_large(exc) from None
        except InvalidPayload as exc:
            raise _payload_error(exc) from None
        except UnknownKind as exc:  # a kind the payload names (a flow's member): the caller's
            raise _payload_error(InvalidPayload(exc.message)) from None
        except InvalidDuration as exc:
            raise InvalidRequestError(errors={"delay": [exc.message]}) from None
        code = status.HTTP_200_OK if job.deduped else status.HTTP_201_CREATED
        return Response(job_json(job, view=view_for(user), deduped=job.deduped), status=code)

    @staticmethod
    def _idempotency_key(request: Request, field: str | None) -> str | None:
        header = request.headers.get("Idempotency-Key")
        if header is None:
            return field
        header = _utf8_header(header, "Idempotency-Key").strip()
        limit = Job._meta.get_field("idempotency_key").max_length or 400
        if not header or len(header) > limit:
            raise InvalidRequestError(
                errors={"Idempotency-Key": [f"Send 1 to {limit} characters, or leave it out."]}
            )
        problem = key_problem(header)
        if problem is not None:
            raise InvalidRequestError(errors={"Idempotency-Key": [storable_text(problem)]})
        if field is not None and field != header:
            raise InvalidRequestError(
                errors={
                    "idempotency_key": [
                        "The Idempotency-Key header and the idempotency_key field differ; "
                        "send one of them."
                    ]
                }
            )
        return header

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        # Tracebacks name server files: operators see them, owners see the error's message.
        return Response(job_detail_json(self.get_object(), view=view_for(request.user)))

    @extend_schema(
        operation_id="jobs_cancel",
        tags=["jobs"],
        summary="Cancel a job",
        description=(
            "A queued or waiting job is cancelled at once; a running job is asked to stop "
            "(its runner sees ctx.cancelled). 409 if the job has already ended."
        ),
        request=CancelSerializer,
        responses=JOB_ACTION_RESPONSES,
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        CancelSerializer(data=request.data).is_valid(raise_exception=True)
        try:
            return Response(_as_seen_by(request.user, operations.cancel(job.pk)))
        except NotCancellable as exc:
            raise ConflictError(exc.message, code=exc.code) from None
        except JobNotFound as exc:
            raise NotFoundError(exc.message) from None

    @extend_schema(
        operation_id="jobs_retry",
        tags=["jobs"],
        summary="Retry a job",
        description=(
            "Queue a failed, blocked or cancelled job again with a fresh set of attempts. "
            "`from_step` forgets that step and the ones after it, so they run again: "
            "operators only (403 RETRY_NOT_ALLOWED otherwise). Operators retry any job; "
            "owners retry their own jobs of member-safe kinds. An unknown job is resolved "
            "first, never retried blindly (409). `children: true` also retries the failed and "
            "cancelled children, down the tree, and the job waits for them: operators only."
        ),
        request=RetrySerializer,
        responses=JOB_ACTION_RESPONSES,
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        body = RetrySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        from_step = body.validated_data.get("from_step")
        children = body.validated_data.get("children", False)
        try:  # refused before the step is looked up: a member learns nothing from a refusal
            operations.check_retry(request.user, job, from_step, children=children)
        except RetryNotAllowed as exc:
            raise RetryNotAllowedError(exc.message) from None
        try:
            return Response(
                _as_seen_by(
                    request.user,
                    operations.retry(
                        job.pk, from_step=from_step, by=request.user, children=children
                    ),
                )
            )
        except RetryNotAllowed as exc:
            raise RetryNotAllowedError(exc.message) from None
        except UnknownStep as exc:  # a field error: the body names a step the job lacks
            raise InvalidRequestError(errors={"from_step": [exc.message]}) from None
        except (NotRetryable, JobDuplicate) as exc:
            raise ConflictError(exc.message, code=exc.code) from None
        except JobNotFound as exc:
            raise NotFoundError(exc.message) from None

    @extend_schema(
        operation_id="jobs_children",
        tags=["jobs"],
        summary="A job's children",
        description=(
            "The jobs its `ctx.step.spawn` steps started, in the order they were spawned, "
            "paginated like the list. Under the parent's authorization: a member sees the "
            "children of their own jobs; another member's job is 404."
        ),
        responses={200: JobSerializer(many=True), 400: E400, 401: E401, 404: E404},
    )
    @action(detail=True, methods=["get"])
    def children(self, request: Request, pk: str | None = None) -> Response:
        parent = self.get_object()
        return self._page_of(self.get_queryset().filter(parent_id=parent.pk).order_by("id"))

    @extend_schema(
        operation_id="kinds_list",
        tags=["kinds"],
        summary="The kinds you may submit",
        description="Members: the member-safe kinds. Operators: every kind.",
        responses={200: KindSerializer(many=True), 401: E401},
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def kinds(self, request: Request) -> Response:
        operator = is_operator(request.user)
        rows = [h.describe() for h in all_handles() if operator or h.member_safe]
        return Response(rows)

    @extend_schema(
        operation_id="stats_retrieve",
        tags=["stats"],
        summary="Queue statistics (operators)",
        responses={200: StatsSerializer, 401: E401, 403: E403},
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def stats(self, request: Request) -> Response:
        return Response(queue_stats())


# --- the fleet: workers and queues ------------------------------------------------------------


class WorkerViewSet(JobsAPIMixin, GenericViewSet):
    """The workers' rows (operators)."""

    serializer_class = WorkerSerializer
    pagination_class = None
    action_permissions: ClassVar[dict[str, tuple[type[BasePermission], ...]]] = {
        "list": (IsOperator,),
    }

    @extend_schema(
        operation_id="workers_list",
        tags=["workers"],
        summary="The workers (operators)",
        description=(
            "Every worker's row, by name: host, pid, engine, queues, processes and "
            "concurrency, heartbeat, state (`running`, `stopping`, `stopped`, or `lost` once "
            "its heartbeat is older than the lease), jobs running and done, version. Stopped "
            "rows are pruned after a day."
        ),
        responses={200: WorkerSerializer(many=True), 401: E401, 403: E403},
    )
    def list(self, request: Request) -> Response:
        return Response(operations.workers())


def _queue_refusal(exc: InvalidPayload | UnknownEngine) -> InvalidRequestError:
    return InvalidRequestError(exc.message, code=exc.code)


class QueueViewSet(JobsAPIMixin, GenericViewSet):
    """The queues, paused or not (operators); pause and resume one."""

    serializer_class = QueueSerializer
    pagination_class = None
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    action_permissions: ClassVar[dict[str, tuple[type[BasePermission], ...]]] = {
        "list": (IsOperator,),
        "pause": (IsOperator,),
        "resume": (IsOperator,),
    }

    @extend_schema(
        operation_id="queues_list",
        tags=["queues"],
        summary="The queues (operators)",
        description="Each queue per engine: `paused`, `reason`, its jobs' counts per state.",
        responses={200: QueueSerializer(many=True), 401: E401, 403: E403},
    )
    def list(self, request: Request) -> Response:
        return Response(operations.queues())

    @extend_schema(
        operation_id="queues_pause",
        tags=["queues"],
        summary="Pause a queue (operators)",
        description=(
            "Within a second no worker starts a job of the queue; running jobs finish and "
            "enqueueing is still accepted. The pause outlives restarts; pausing a paused "
            "queue updates its reason."
        ),
        request=PauseSerializer,
        responses={200: PausedSerializer, 400: E400, 401: E401, 403: E403, 415: E415},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str | None = None) -> Response:
        body = PauseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = request.user
        try:
            paused = operations.pause_queue(
                name or "",
                engine=body.validated_data["engine"],
                reason=body.validated_data["reason"],
                paused_by=user.get_username() if hasattr(user, "get_username") else "",
            )
        except (InvalidPayload, UnknownEngine) as exc:
            raise _queue_refusal(exc) from None
        return Response(paused)

    @extend_schema(
        operation_id="queues_resume",
        tags=["queues"],
        summary="Resume a queue (operators)",
        description="Workers start its jobs again within a second.",
        request=ResumeSerializer,
        responses={200: ResumedSerializer, 400: E400, 401: E401, 403: E403, 415: E415},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str | None = None) -> Response:
        body = ResumeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            resumed = operations.resume_queue(name or "", engine=body.validated_data["engine"])
        except (InvalidPayload, UnknownEngine) as exc:
            raise _queue_refusal(exc) from None
        return Response(resumed)


# --- schedules -----------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        operation_id="schedules_list",
        tags=["schedules"],
        summary="List schedules",
        description="Operators see every schedule; members the schedules they own.",
        responses={200: ScheduleSerializer(many=True), 400: E400, 401: E401, 404: E404},
    ),
    create=extend_schema(
        operation_id="schedules_create",
        tags=["schedules"],
        summary="Add a schedule",
        description=(
            "Operators schedule any kind; members schedule kinds that are member-safe and "
            "schedulable, and own what they add."
        ),
        responses={
            201: ScheduleSerializer,
            400: E400,
            401: E401,
            403: E403,
            413: E413,
            415: E415,
            429: E429,
        },
    ),
    retrieve=extend_schema(
        operation_id="schedules_retrieve",
        tags=["schedules"],
        summary="A schedule",
        responses={200: ScheduleSerializer, 401: E401, 404: E404},
    ),
    partial_update=extend_schema(
        operation_id="schedules_update",
        tags=["schedules"],
        summary="Change or pause a schedule",
        description='`{"enabled": false}` pauses it; `next_run_at` follows cron, tz and enabled.',
        responses={
            200: ScheduleSerializer,
            400: E400,
            401: E401,
            403: E403,
            404: E404,
            413: E413,
            415: E415,
        },
    ),
    destroy=extend_schema(
        operation_id="schedules_delete",
        tags=["schedules"],
        summary="Delete a schedule",
        responses={
            204: OpenApiResponse(description="Deleted."),
            401: E401,
            403: E403,
            404: E404,
        },
    ),
)
class ScheduleViewSet(JobsAPIMixin, GenericViewSet):
    """Cron schedules (§6): operators manage all; members their own, for schedulable kinds."""

    serializer_class = ScheduleSerializer
    page_bytes_of: ClassVar[list[str]] = ["payload"]
    action_permissions: ClassVar[dict[str, tuple[type[BasePermission], ...]]] = {
        "list": (),
        "create": (),
        "retrieve": (),
        "partial_update": (),
        "destroy": (),
    }

    def get_queryset(self) -> Any:
        schedules = Schedule.objects.using(jobs_settings.DATABASE).order_by("name", "id")
        return _user_rows(schedules, self.request.user)

    def get_object(self) -> Schedule:
        try:
            schedule = self.get_queryset().get(pk=self.get_int_pk())
        except Schedule.DoesNotExist:
            raise NotFoundError(
                "No schedule has this id, or it is not yours. GET the schedule list to see yours."
            ) from None
        self.check_object_permissions(self.request, schedule)
        return schedule

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(ScheduleSerializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(ScheduleSerializer(self.get_object()).data)

    def create(self, request: Request) -> Response:
        body = ScheduleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = request.user
        _operator_options(user, body.validated_data)
        with _schedule_refusals():
            schedule = schedules.create(**body.validated_data, owner=user, by=user)
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        schedule = self.get_object()
        body = ScheduleSerializer(schedule, data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        _operator_options(request.user, body.validated_data)
        with _schedule_refusals():
            schedules.update(schedule, body.validated_data, by=request.user)
        return Response(ScheduleSerializer(schedule).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        schedule = self.get_object()
        with _schedule_refusals():
            schedules.delete(schedule, by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _operator_options(user: Any, data: Mapping[str, Any]) -> None:
    """A member setting a schedule's queue or priority: 403, as on submit."""
    chosen = data.get("queue") is not None or data.get("priority") is not None
    if chosen and not is_operator(user):
        raise OperatorOnlyFieldError()


@contextmanager
def _schedule_refusals() -> Iterator[None]:
    """The schedule service's refusals (``engine.schedules``) as the API's errors."""
    try:
        yield
    except ScheduleNotAllowed:
        # One body for a kind that does not exist and one the caller may not schedule.
        raise KindNotAllowedError() from None
    except PayloadTooLarge as exc:
        raise _too_large(exc) from None
    except InvalidPayload as exc:
        raise _payload_error(exc) from None
    except InvalidSchedule as exc:
        raise InvalidRequestError(errors={exc.field or "non_field_errors": [exc.message]}) from None


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


def _as_seen_by(user: Any, data: dict[str, Any]) -> dict[str, Any]:
    """An operator's job JSON (``operations``) as ``user`` may see it."""
    return member_view(data) if view_for(user) is View.MEMBER else data


# --- the OpenAPI schema --------------------------------------------------------------------


class JobsSchemaGenerator(SchemaGenerator):
    """The schema of this API only, whatever else the project's URLconf serves."""

    def _initialise_endpoints(self) -> None:
        super()._initialise_endpoints()

        def ours(endpoint: Any) -> bool:
            # drf-spectacular's endpoints are (path, regex, method, view); the stubs type DRF's.
            view = getattr(endpoint[3], "cls", None)
            return (
                getattr(view, "__module__", "").startswith("django_jobs.")
                and view is not SchemaView
            )

        self.endpoints = [endpoint for endpoint in self.endpoints or () if ours(endpoint)]


#: The request bodies the API reads; each refuses fields it does not name (KnownFieldsOnly).
CLOSED_REQUEST_BODIES = (
    "CancelRequest",
    "SubmitRequest",
    "RetryRequest",
    "ScheduleRequest",
    "PatchedScheduleRequest",
)


#: The operations whose body is required: JSON even when empty (``{}``), as every write.
REQUIRED_BODIES = ("jobs_cancel", "jobs_retry", "schedules_update")
ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
#: A body without fields (cancel's): ``{}``.
NO_FIELDS = {
    "application/json": {
        "schema": {"type": "object", "additionalProperties": False, "description": "Send {}."}
    }
}
#: The answers every operation may give, whatever it does.
EVERY_OPERATION = {
    "405": {
        "description": "The path does not serve this method (the Allow header names those "
        "it does), whatever the body.",
        "content": ERROR_CONTENT,
    },
    "429": {
        "description": "Throttled: a member's submits, retries and schedule creations past "
        'JOBS["MEMBER_RATE"], or refused credentials from this address past '
        'JOBS["AUTH_FAILURE_RATE"] (then every request carrying credentials). Send it again '
        "after Retry-After seconds.",
        "headers": {
            "Retry-After": {
                "schema": {"type": "integer", "minimum": 1},
                "description": "Whole seconds to wait.",
            }
        },
        "content": ERROR_CONTENT,
    },
}


def every_operations_refusals(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say in the schema what every view does: 405 for a method a path does not serve, 429
    past a throttle (refused credentials apply to every operation); and that cancel, retry
    and PATCH read a required JSON body."""
    for path in result.get("paths", {}).values():
        for operation in path.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for code, answer in EVERY_OPERATION.items():
                operation["responses"].setdefault(code, answer)
            operation["responses"]["429"].setdefault("headers", EVERY_OPERATION["429"]["headers"])
            if operation.get("operationId") not in REQUIRED_BODIES:
                continue
            body = operation.setdefault("requestBody", {"content": NO_FIELDS})
            body["required"] = True
    return result


def closed_request_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say in the schema what the serializers do: an unknown body field is a 400."""
    schemas = result.get("components", {}).get("schemas", {})
    for name in CLOSED_REQUEST_BODIES:
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    return result


class SchemaView(SpectacularAPIView):
    """``GET schema/``: OpenAPI 3 for anyone. YAML by default; ``?format=json`` for JSON.

    The schema is built once per process and language (building it takes a good part of a
    second): ``built`` holds it until a setting changes. The languages are those of
    ``settings.LANGUAGES`` only (``openapi.schema_language``): ``?lang=`` names one, anything
    else is the default language. Refusals are the API's JSON errors
    (``?format=xml`` is a 404 saying which formats there are).
    """

    generator_class = JobsSchemaGenerator
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    custom_settings: dict[str, Any] = {
        "TITLE": "django_jobs API",
        "DESCRIPTION": (
            "Durable background jobs: submit, inspect, cancel and retry jobs; list kinds; "
            "queue statistics; cron schedules. Errors are JSON {code, message[, errors]}."
        ),
        "VERSION": __version__,
        "COMPONENT_SPLIT_REQUEST": True,
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "django_jobs.api.views.closed_request_bodies",
            "django_jobs.api.views.every_operations_refusals",
        ],
    }

    #: The built schema, by language (``clear_built_schemas`` empties it).
    built: ClassVar[dict[str, dict[str, Any]]] = {}

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # Not drf-spectacular's ``get``: it activates any ``?lang=`` it is sent.
        language = schema_language(request.query_params.get("lang"))
        with patched_settings(self.custom_settings), translation.override(language):
            return self._get_schema_response(request)

    def _get_schema_response(self, request: Request) -> Response:
        language = translation.get_language() or ""
        schema = self.built.get(language)
        if schema is None:
            generator = self.generator_class(urlconf=self.urlconf, patterns=self.patterns)
            schema = generator.get_schema(request=None, public=self.serve_public)
            self.built[language] = schema
        suffix = self.perform_content_negotiation(request, force=True)[0].format
        return Response(
            data=schema,
            headers={"Content-Disposition": f'inline; filename="django_jobs API.{suffix}"'},
        )

    def get_exception_handler(self) -> Any:
        return exception_handler

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, Http404) and self.request.query_params.get("format"):
            exc = NotFoundError(
                "The schema comes as YAML (the default, or ?format=yaml) or JSON (?format=json)."
            )
        response = super().handle_exception(exc)
        # An error is JSON, whatever format the schema was asked in.
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = "application/json"
        return response


@receiver(setting_changed)
def clear_built_schemas(*, setting: str, **kwargs: Any) -> None:
    """A setting may change the schema (page sizes, drf-spectacular's): build it again."""
    SchemaView.built.clear()


__all__ = ["JobViewSet", "JobsAPIMixin", "ScheduleViewSet", "SchemaView"]
