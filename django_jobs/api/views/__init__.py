"""The API's views: jobs, kinds, stats, the fleet, schedules and the OpenAPI schema.

Every action names its permission rules in ``action_permissions``; an action without rules is
refused (``DenyAll``). Members only ever query their own rows, so another member's job or
schedule answers 404. State changes go through ``django_jobs.operations`` and admission.

The modules, by concern: ``base`` (what every view shares: ``JobsAPIMixin``, the refusals'
helpers, the JSON 404), ``responses`` (the schema's shared answers and parameters), ``jobs``
(``JobViewSet``), ``job_actions`` (cancel, retry, children: mixed into it), ``fleet`` (workers,
queues; kinds and stats, mixed into ``JobViewSet``), ``schedules`` and ``schema`` (``GET
schema/`` and its hooks). The names below are the ones the URLconf and projects import from
here.
"""

from __future__ import annotations

from .base import FALLBACK_CHALLENGE, JobsAPIMixin, not_found
from .fleet import QueueViewSet, WorkerViewSet
from .jobs import JobViewSet
from .schedules import ScheduleViewSet
from .schema import (
    JobsSchemaGenerator,
    SchemaView,
    closed_request_bodies,
    described_refusals,
    every_operations_refusals,
    operators_only_fields,
)

__all__ = [
    "FALLBACK_CHALLENGE",
    "JobViewSet",
    "JobsAPIMixin",
    "JobsSchemaGenerator",
    "QueueViewSet",
    "ScheduleViewSet",
    "SchemaView",
    "WorkerViewSet",
    "closed_request_bodies",
    "described_refusals",
    "every_operations_refusals",
    "not_found",
    "operators_only_fields",
]
