"""Log lines as JSON: ``runjobs --log-format json``, or a project's own ``LOGGING``.

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
