"""The options of ``@shared_task(...)`` and a ``base=`` class: which mean here what they mean
in Celery, and which are refused at import, each with the native way.

Honoured (Celery's meaning and default; docs/migrating-from-celery.md has the table): ``name``,
``bind``, ``base``, ``max_retries``, ``default_retry_delay``, ``autoretry_for``,
``dont_autoretry_for``, ``retry_kwargs``, ``retry_backoff``, ``retry_backoff_max``,
``retry_jitter``, ``soft_time_limit``, ``time_limit``, ``queue``, ``priority``, ``expires``,
``rate_limit``, ``ignore_result``, ``throws``, ``typing``, ``acks_late``,
``reject_on_worker_lost``, ``track_started``, ``serializer="json"``. Any other name becomes an
attribute of the task's class, as Celery does with it.
"""

from __future__ import annotations

from typing import Any

#: Options whose meaning cannot be kept, on the task and on a call alike, with the native way.
ROUTING = "route by queue=: a worker serves the queues it is given (runjobs --queues)"
SHARED_REFUSALS = {
    "compression": "a payload is a database row (PostgreSQL compresses large values itself); "
    "leave compression= out",
    "reply_to": "read the result from the job (AsyncResult(id).get(), or its live events)",
    "exchange": ROUTING,
    "routing_key": ROUTING,
}

#: The task's options refused at import: those above, and the task-only ones.
REFUSED = {
    **SHARED_REFUSALS,
    "backend": "a task's result is its job's row (AsyncResult reads it); leave backend= out",
    "pydantic": "validate the payload with a DRF serializer on a native kind: @job(input=...)",
    "pydantic_strict": "validate the payload with a DRF serializer on a native kind: "
    "@job(input=...)",
    "pydantic_context": "validate the payload with a DRF serializer on a native kind: "
    "@job(input=...)",
    "pydantic_dump_kwargs": "validate the payload with a DRF serializer on a native kind: "
    "@job(input=...)",
    "request_stack": "self.request is kept per thread here; leave request_stack= out",
}


def serializer_refusal(value: Any) -> str | None:
    """Why ``serializer=value`` is refused; None for JSON, the one offered."""
    if value in (None, "json"):
        return None
    return (
        f"serializer={value!r}: arguments and results are stored as JSON (Celery's json "
        "serializer, with datetime, Decimal, UUID); pass JSON values and leave serializer= out"
    )


def check_options(name: str, options: dict[str, Any]) -> None:
    """Refuse, at import, an option whose meaning this layer cannot keep."""
    for option, value in options.items():
        why = serializer_refusal(value) if option == "serializer" else None
        if why is not None:
            raise NotImplementedError(f"@shared_task(name={name!r}, {why}.")
        if option in REFUSED:
            raise NotImplementedError(
                f"@shared_task(name={name!r}, {option}=...) cannot mean here what it means in "
                f"Celery: {REFUSED[option]}."
            )
        if option in ("autoretry_for", "dont_autoretry_for", "throws"):
            types = value if isinstance(value, tuple | list) else (value,)
            if not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
                raise TypeError(
                    f"@shared_task(name={name!r}, {option}={value!r}): pass a tuple of "
                    "exception classes, e.g. (ConnectionError, TimeoutError)."
                )
            options[option] = tuple(types)
