"""OpenTelemetry tracing of the jobs: the public names (docs/observability.md).

``configure(tracer_provider=...)`` picks the ``TracerProvider`` (otherwise
``JOBS["TRACER_PROVIDER"]``, then OpenTelemetry's global one). The spans themselves come from
``django_jobs.engine.observe.tracing``. Every log record made while a job runs carries its
``job_id``, ``kind``, ``attempt``, ``queue`` and, when tracing, ``trace_id``/``span_id``
(``django_jobs.engine.observe.records``); ``JobLogFilter`` is kept for the ``LOGGING`` settings
that name it, and changes nothing.
"""

from __future__ import annotations

from ..engine.observe.records import JobLogFilter
from ..engine.observe.tracing import configure, enabled

__all__ = ["JobLogFilter", "configure", "enabled"]
