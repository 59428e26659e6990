"""Jobs: list, submit and inspect (``JobViewSet``), with its actions mixed in.

A job's own actions (cancel, retry, its children) are in ``job_actions``; the kinds manifest
and the queue statistics, routes of this viewset too, are in ``fleet``.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ClassVar

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from ... import clock
from ...conf import jobs_settings
from ...exceptions import InvalidDuration, InvalidPayload, PayloadTooLarge, UnknownKind
from ...kinds.registry import all_handles, get
from ...models import Job
from ...permissions import can_submit, is_operator
from ...search import InvalidFilter, JobSearch, OperatorOnlyFilter, search_from_query
from ...serialize import attach_children, job_detail_json, job_json, view_for
from ...states import JobState
from ...validation import check_label, key_problem, storable_text
from ..errors import (
    InvalidRequestError,
    KindNotAllowedError,
    NotFoundError,
    OperatorOnlyFieldError,
    OperatorOnlyFilterError,
    UnknownKindError,
)
from ..openapi import extend_schema, extend_schema_view
from ..permissions import CanRetryJob, IsOperator
from ..serializers import (
    JobDetailSerializer,
    JobSerializer,
    SubmitSerializer,
    SubmittedJobSerializer,
)
from .base import JobsAPIMixin, payload_error, too_large, user_rows
from .fleet import KindsAndStatsMixin
from .job_actions import JobActionsMixin
from .responses import E400, E401, E403, E404, E413, E415, E429, LABEL_FILTER, SEARCH_PARAMETERS


def _utf8_header(value: str, name: str) -> str:
    """A header's text as the client sent it: WSGI and ASGI hand headers over as latin-1,
    so UTF-8 bytes arrive as one character per byte; bytes that are not UTF-8 are a 400."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise InvalidRequestError(
            errors={name: ["Send this header as UTF-8 text (or plain ASCII)."]}
        ) from None


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
        description=(
            "Members see their own jobs, operators every job; newest first. Every filter "
            "narrows the jobs the caller may see; a malformed one is a 400 whose `errors` name "
            "it.\n\n"
            "**Payload filters**: `payload.<path>=<value>`, e.g. `?payload.user.id=42`: the "
            "payload's value at the dotted path (at most 8 keys; a key is letters, digits, `_` "
            "and `-`, starting with a letter or `_`; digits alone index a list). A value that "
            "reads as a JSON number, `true`, `false` or `null` matches that JSON value or the "
            'same text as a string; a value in double quotes (`"42"`) matches that string only; '
            "any other value matches as a string. Several payload filters must all match. "
            "Each search filter may be given once."
        ),
        parameters=[
            OpenApiParameter("state", str, enum=JobState.values, description="Only this state."),
            OpenApiParameter("kind", LABEL_FILTER, description="Only this kind."),
            OpenApiParameter("queue", LABEL_FILTER, description="Only this queue."),
            *SEARCH_PARAMETERS,
        ],
        responses={200: JobSerializer(many=True), 400: E400, 401: E401, 403: E403, 404: E404},
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
class JobViewSet(JobActionsMixin, KindsAndStatsMixin, JobsAPIMixin, GenericViewSet):
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
        "charts": (IsOperator,),
    }

    def get_queryset(self) -> Any:
        jobs = Job.objects.using(jobs_settings.DATABASE).order_by("-id")
        return user_rows(jobs, self.request.user)

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
        errors = {} if filters.is_valid() else dict(filters.errors)
        search = JobSearch()
        try:
            search = search_from_query(request.query_params)
        except InvalidFilter as exc:
            errors.update({name: [text] for name, text in exc.errors.items()})
        if errors:
            raise InvalidRequestError(errors=errors)
        jobs = self.get_queryset()  # the caller's jobs first: no filter reaches others'
        for name, value in filters.validated_data.items():
            jobs = jobs.filter(**{name: value})
        try:
            jobs = search.apply(jobs, operator=is_operator(request.user))
        except OperatorOnlyFilter as exc:
            raise OperatorOnlyFilterError(
                errors={name: [text] for name, text in exc.errors.items()}
            ) from None
        return self.page_of(jobs)

    def page_of(self, jobs: Any) -> Response:
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
            raise too_large(exc) from None
        except InvalidPayload as exc:
            raise payload_error(exc) from None
        except UnknownKind as exc:  # a kind the payload names (a flow's member): the caller's
            raise payload_error(InvalidPayload(exc.message)) from None
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
