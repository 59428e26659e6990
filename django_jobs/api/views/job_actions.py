"""A job's actions: cancel it, retry it, page through its children.

``JobActionsMixin`` is mixed into ``JobViewSet`` (``jobs``), whose rows (a member's own only)
and pages it uses; the changes go through ``django_jobs.operations``, as the admin's and the
CLI's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from ... import operations
from ...exceptions import (
    JobDuplicate,
    JobNotFound,
    NotCancellable,
    NotRetryable,
    RetryNotAllowed,
    UnknownStep,
)
from ...models import Job
from ...serialize import View, member_view, view_for
from ..errors import ConflictError, InvalidRequestError, NotFoundError, RetryNotAllowedError
from ..openapi import extend_schema
from ..serializers import CancelSerializer, JobSerializer, RetrySerializer
from .responses import E400, E401, E404, JOB_ACTION_RESPONSES


def _as_seen_by(user: Any, data: dict[str, Any]) -> dict[str, Any]:
    """An operator's job JSON (``operations``) as ``user`` may see it."""
    return member_view(data) if view_for(user) is View.MEMBER else data


class JobActionsMixin:
    """``POST {id}/cancel/``, ``POST {id}/retry/`` and ``GET {id}/children/``, mixed into
    ``JobViewSet``."""

    if TYPE_CHECKING:  # JobViewSet's

        def get_object(self) -> Job: ...

        def get_queryset(self) -> Any: ...

        def page_of(self, jobs: Any) -> Response: ...

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
        return self.page_of(self.get_queryset().filter(parent_id=parent.pk).order_by("id"))
