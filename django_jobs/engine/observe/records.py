"""The running job's fields on every log record made in its thread, for any handler.

While a job runs (``running.CURRENT`` names it), each ``LogRecord`` made in its context carries
``job_id``, ``kind``, ``attempt``, ``queue`` and, when tracing, ``trace_id`` and ``span_id``
(hex; the step's span inside a step), as if passed in ``extra``: a formatter names them
(``%(job_id)s``), a JSON formatter writes them, a test's ``caplog`` sees them. They are added
where the record is made, by a log record factory (``logging.setLogRecordFactory``, as
OpenTelemetry's logging instrumentation adds its ``otelTraceID``), not by a filter on some
handlers: a handler added after the worker started gets them too.

``install_log_fields`` wraps the factory in place (the previous one is called first, so a
factory installed before, OpenTelemetry's for one, keeps working), once per process: the worker
and ``run_until_idle`` call it as they start running jobs. Outside a job the factory costs one
context variable read per record.

A call's own ``extra`` wins: ``log.info("sent", extra={"queue": "sms"})`` in a job keeps
``queue="sms"``. ``Logger.makeRecord`` refuses an ``extra`` key the record already has
(``KeyError: Attempt to overwrite``), so the fields are added in a dict that does not count
them as present (``_JobFields``); every other read (an attribute, a ``%`` format, iterating
``__dict__``, a copy, a pickle) sees them as plain attributes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .running import CURRENT, Running
from .tracing import span_ids

__all__ = ["LOG_FIELDS", "JobLogFilter", "add_job_fields", "install_log_fields"]

#: The fields a record made while a job runs carries, in this order (then ``trace_id`` and
#: ``span_id`` when tracing).
LOG_FIELDS = ("job_id", "kind", "attempt", "queue")


class _JobFields(dict[str, Any]):
    """A record's ``__dict__`` with the job's fields added: ``key in`` is False for those, so
    that ``Logger.makeRecord`` lets a call's ``extra`` replace them instead of raising."""

    added: tuple[str, ...] = ()

    def __contains__(self, key: object) -> bool:
        return key not in self.added and dict.__contains__(self, key)


def add_job_fields(record: logging.LogRecord, running: Running | None = None) -> None:
    """Add the running job's fields to ``record`` (those it does not have already); nothing
    outside a job, or for a record that has them."""
    running = running or CURRENT.get()
    fields = record.__dict__
    if running is None or type(fields) is _JobFields:
        return
    job = running.job
    values: dict[str, Any] = {
        "job_id": job.pk,
        "kind": job.kind,
        "attempt": job.attempts,
        "queue": job.queue,
    }
    if running.trace is not None:
        ids = span_ids(running)
        if ids is not None:
            values["trace_id"], values["span_id"] = ids
    with_job = _JobFields(fields)
    if fields.keys().isdisjoint(values):  # the common case: one update
        with_job.update(values)
        with_job.added = tuple(values)
    else:
        added = tuple(name for name in values if name not in fields)
        for name in added:
            with_job[name] = values[name]
        with_job.added = added
    record.__dict__ = with_job


class JobLogFilter(logging.Filter):
    """Adds the running job's fields to the records that pass it. Not needed since every
    record made while a job runs carries them (``install_log_fields``); kept for the
    ``LOGGING`` settings that name it, where it changes nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        add_job_fields(record)
        return True


def _with_job_fields(
    previous: Callable[..., logging.LogRecord],
) -> Callable[..., logging.LogRecord]:
    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        running = CURRENT.get()
        if running is not None:
            add_job_fields(record, running)
        return record

    make_record.django_jobs_fields = True  # type: ignore[attr-defined]
    return make_record


def install_log_fields() -> None:
    """Make every log record made while a job runs carry its fields, from now on in this
    process: the current record factory wrapped, once (again if it was replaced since)."""
    current = logging.getLogRecordFactory()
    if not getattr(current, "django_jobs_fields", False):
        logging.setLogRecordFactory(_with_job_fields(current))
