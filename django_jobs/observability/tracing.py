"""OpenTelemetry tracing of the jobs: the public names (docs/observability.md).

``configure(tracer_provider=...)`` picks the ``TracerProvider`` (otherwise
``JOBS["TRACER_PROVIDER"]``, then OpenTelemetry's global one); ``JobLogFilter`` adds the running
job's ``job_id``, ``kind``, ``attempt``, ``queue`` and, when tracing, ``trace_id``/``span_id``
to log records. The spans themselves come from ``django_jobs.engine.observe.tracing``.
"""

from __future__ import annotations

from ..engine.observe.tracing import JobLogFilter, configure, enabled, install_log_filter

__all__ = ["JobLogFilter", "configure", "enabled", "install_log_filter"]
