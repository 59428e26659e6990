"""Cron schedules (§6): operators manage all; members their own, for schedulable kinds.

The views hand every change to the schedule service (``django_jobs.engine.schedules``), whose
refusals become the API's errors here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from ...conf import jobs_settings
from ...engine import schedules
from ...exceptions import InvalidPayload, InvalidSchedule, PayloadTooLarge, ScheduleNotAllowed
from ...models import Schedule
from ...permissions import is_operator
from ..errors import (
    InvalidRequestError,
    KindNotAllowedError,
    NotFoundError,
    OperatorOnlyFieldError,
)
from ..openapi import extend_schema, extend_schema_view
from ..serializers import ScheduleSerializer
from .base import JobsAPIMixin, payload_error, too_large, user_rows
from .responses import E400, E401, E403, E404, E413, E415, E429


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
        return user_rows(schedules, self.request.user)

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
        raise too_large(exc) from None
    except InvalidPayload as exc:
        raise payload_error(exc) from None
    except InvalidSchedule as exc:
        raise InvalidRequestError(errors={exc.field or "non_field_errors": [exc.message]}) from None
