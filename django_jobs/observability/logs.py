"""Log lines as runjobs writes them: as text, or as JSON (``runjobs --log-format json``, or a
project's own ``LOGGING``).

``TextFormatter`` writes ``time level logger: message``; a record made while a job runs (it
carries the job's fields, ``engine.observe.records``) names the job after its logger:
``time level logger [job_id=42 kind=shop.invoice attempt=1 queue=default]: message``. The
worker's own per-job lines (``job.started``, ``job.ended``) say the same fields in their
message, and are written as they are.

``JsonFormatter`` writes each record as one JSON object on one line: ``time`` (ISO 8601, UTC),
``level``, ``logger``, ``message``, then the record's extra fields (the worker's per-job lines
carry ``event``, ``job``, ``kind``, ``attempt``, ``worker`` and, at the end, ``outcome`` and
``duration_s``), and ``exception`` when the record has one::

    LOGGING = {
        "version": 1,
        "formatters": {"json": {"()": "django_jobs.observability.logs.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {"django_jobs": {"handlers": ["console"], "level": "INFO"}},
    }
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

#: The attributes every ``LogRecord`` has; any other one came in ``extra=``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The job's fields a text line names, in this order (``engine.observe.records``).
_JOB_FIELDS = ("job_id", "kind", "attempt", "queue", "trace_id", "span_id")


class TextFormatter(logging.Formatter):
    """``time level logger: message``, with the running job's fields after the logger."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        fields = record.__dict__
        if fields.get("job_id") is None or fields.get("event") is not None:
            return super().formatMessage(record)
        job = " ".join(
            f"{name}={fields[name]}" for name in _JOB_FIELDS if fields.get(name) is not None
        )
        return f"{record.asctime} {record.levelname} {record.name} [{job}]: {record.message}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a newline in a message is escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in data:
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            data["exception"] = record.exc_text
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, ensure_ascii=False, default=str)
