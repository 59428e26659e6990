"""The fleet: workers and queues (operators), the kinds manifest and the queue statistics.

``WorkerViewSet`` and ``QueueViewSet`` have routes of their own (``workers/``, ``queues/``);
``GET kinds/`` and ``GET stats/`` are routes of the job viewset (``KindsAndStatsMixin``, mixed
into ``JobViewSet``), served at the API's root.
"""

from __future__ import annotations

from typing import ClassVar

from drf_spectacular.utils import OpenApiParameter
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from ... import operations
from ...exceptions import InvalidPayload, UnknownEngine
from ...kinds.registry import all_handles
from ...observability.charts import InvalidChart, chart_series
from ...observability.stats import queue_stats
from ...permissions import is_operator
from ..errors import InvalidRequestError
from ..openapi import extend_schema
from ..permissions import IsOperator
from ..serializers import (
    ChartsSerializer,
    KindSerializer,
    PausedSerializer,
    PauseSerializer,
    QueueSerializer,
    ResumedSerializer,
    ResumeSerializer,
    StatsSerializer,
    WorkerSerializer,
)
from .base import JobsAPIMixin
from .responses import E400, E401, E403, E415, LABEL_FILTER, QUEUE_NAME


class KindsAndStatsMixin:
    """``GET kinds/`` (the kinds the caller may submit) and ``GET stats/`` (operators), mixed
    into ``JobViewSet``."""

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

    @extend_schema(
        operation_id="charts_retrieve",
        tags=["stats"],
        summary="The charts over time (operators)",
        description=(
            "Jobs succeeded and failed, runtime p50/p95 per kind, pickup latency, and each "
            "queue's depth and oldest queued job's age, per bucket of the window (1h: "
            "minutes, 24h: 15 minutes, 7d: hours), read from the per-minute rollups."
        ),
        parameters=[
            OpenApiParameter("window", str, enum=["1h", "24h", "7d"], description="Default 1h."),
            OpenApiParameter("queue", LABEL_FILTER, description="Only this queue's jobs."),
            OpenApiParameter("kind", LABEL_FILTER, description="Only this kind's jobs."),
        ],
        responses={200: ChartsSerializer, 400: E400, 401: E401, 403: E403},
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def charts(self, request: Request) -> Response:
        params = request.query_params
        unknown = sorted(set(params) - {"window", "queue", "kind"})
        try:
            if unknown:
                raise InvalidChart(dict.fromkeys(unknown, "not a parameter of charts/."))
            series = chart_series(
                params.get("window", "1h"),
                queue=params.get("queue"),
                kind=params.get("kind"),
            )
        except InvalidChart as exc:
            errors = {name: [text] for name, text in exc.errors.items()}
            raise InvalidRequestError(
                f"Malformed chart parameters: {exc.message} (window: 1h, 24h or 7d; queue and "
                "kind: names).",
                errors=errors,
                code=exc.code,
            ) from None
        return Response(series)


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
        parameters=[QUEUE_NAME],
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
        parameters=[QUEUE_NAME],
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
