"""django_jobs: durable background jobs for Django.

The public API (see the docs): ``job``, ``Retry``, ``enqueue``, ``emit``, ``schedule``,
``wake_waiting``, ``describe_kinds``, introspection and operator actions, and the errors.
Names are imported lazily so that importing ``django_jobs`` never touches settings or models.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "job": "django_jobs.kinds.registry",
    "JobHandle": "django_jobs.kinds.registry",
    "Retry": "django_jobs.kinds.retry",
    "StepInfo": "django_jobs.engine.durable.steps",
    "ChildResult": "django_jobs.engine.durable.workflows",
    "enqueue": "django_jobs.kinds.registry",
    "chain": "django_jobs.canvas",
    "group": "django_jobs.canvas",
    "Signature": "django_jobs.kinds.signature",
    "emit": "django_jobs.engine.durable.emit",
    "schedule": "django_jobs.engine.schedules",
    "wake_waiting": "django_jobs.operations",
    "describe_kinds": "django_jobs.operations",
    "inspect_queues": "django_jobs.operations",
    "pause_queue": "django_jobs.operations",
    "resume_queue": "django_jobs.operations",
    "inspect_job": "django_jobs.operations",
    "dead_letters": "django_jobs.operations",
    "retry": "django_jobs.operations",
    "cancel": "django_jobs.operations",
    "resolve": "django_jobs.operations",
    "JobsError": "django_jobs.exceptions",
    "IdempotencyRequired": "django_jobs.exceptions",
    "JobDuplicate": "django_jobs.exceptions",
    "StepDuplicate": "django_jobs.exceptions",
    "StepNested": "django_jobs.exceptions",
    "JobTimeout": "django_jobs.exceptions",
    "MaxAttempts": "django_jobs.exceptions",
    "OutboxNoTransaction": "django_jobs.exceptions",
    "UnknownKind": "django_jobs.exceptions",
    "InvalidPayload": "django_jobs.exceptions",
    "InvalidResult": "django_jobs.exceptions",
    "InvalidDuration": "django_jobs.exceptions",
    "InvalidSchedule": "django_jobs.exceptions",
    "Cancelled": "django_jobs.exceptions",
    "NotRetryable": "django_jobs.exceptions",
    "RetryNotAllowed": "django_jobs.exceptions",
    "NotCancellable": "django_jobs.exceptions",
    "ChildFailed": "django_jobs.exceptions",
    "JobNotFound": "django_jobs.exceptions",
    "RetryLater": "django_jobs.exceptions",
    "Blocked": "django_jobs.exceptions",
    "Unrecoverable": "django_jobs.exceptions",
    "Uncertain": "django_jobs.exceptions",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'django_jobs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
