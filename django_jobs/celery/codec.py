"""Celery's JSON, as kombu writes it: what a task's arguments and its result may hold.

JSON itself, and ``datetime``, ``date``, ``time``, ``Decimal``, ``UUID`` and ``bytes`` as tagged
objects (``{"__type__": "datetime", "__value__": "2026-12-07T10:00:00+00:00"}``), the same wire
form kombu's JSON serializer uses, so a payload reads the same in the admin as in a Celery
message. A tuple becomes a list (JSON has no tuples), a lazy translation its text, an object
with ``__json__()`` what that returns. Anything else is refused at the call, with what to pass
instead: Celery's JSON serializer refuses it too (its pickle serializer is not offered here).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from django.utils.functional import Promise

TYPE, VALUE = "__type__", "__value__"


def _uuid(value: Any) -> uuid.UUID:
    return uuid.UUID(hex=value["hex"]) if isinstance(value, dict) else uuid.UUID(value)


#: Tag -> how to read its value back.
DECODERS: dict[str, Callable[[Any], Any]] = {
    "datetime": datetime.fromisoformat,
    "date": lambda value: datetime.fromisoformat(value).date(),
    "time": time.fromisoformat,
    "decimal": Decimal,
    "uuid": _uuid,
    "bytes": lambda value: value.encode("utf-8"),
    "base64": lambda value: base64.b64decode(value.encode("ascii")),
}


def _tagged(tag: str, value: Any) -> dict[str, Any]:
    return {TYPE: tag, VALUE: value}


def _extra(value: Any) -> Any:
    """One value JSON cannot hold as it is, tagged; TypeError for one Celery's JSON refuses."""
    # datetime before date: a datetime is a date too.
    if isinstance(value, datetime):
        return _tagged("datetime", value.isoformat())
    if isinstance(value, date):
        return _tagged("date", value.isoformat())
    if isinstance(value, time):
        return _tagged("time", value.isoformat())
    if isinstance(value, Decimal):
        return _tagged("decimal", str(value))
    if isinstance(value, uuid.UUID):
        return _tagged("uuid", {"hex": value.hex})
    if isinstance(value, bytes):
        try:
            return _tagged("bytes", value.decode("utf-8"))
        except UnicodeDecodeError:
            return _tagged("base64", base64.b64encode(value).decode("ascii"))
    if isinstance(value, Promise):
        return str(value)
    reducer = getattr(value, "__json__", None)
    if callable(reducer):
        return encode(reducer())
    raise TypeError(
        f"{type(value).__name__} is not JSON: a task's arguments and result are stored as JSON "
        "(Celery's JSON serializer, with datetime, date, time, Decimal, UUID and bytes). Pass "
        "its id or its fields instead (a model instance: its pk), or give the class a "
        "__json__() method that returns JSON."
    )


def encode(value: Any) -> Any:
    """``value`` as plain JSON, the extra types tagged."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                if isinstance(key, bool) or key is None:
                    key = json.dumps(key)  # as json.dumps writes such a key: "true", "null"
                elif isinstance(key, (int, float)):
                    key = str(key)
                else:
                    raise TypeError(
                        f"A dict key of type {type(key).__name__} is not JSON: use text keys."
                    )
            out[key] = encode(item)
        return out
    return _extra(value)


def arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """A task call's ``(args, kwargs)`` from its job's payload, ``{"args", "kwargs"}``."""
    payload = payload if isinstance(payload, dict) else {}
    return decode(payload.get("args") or []), decode(payload.get("kwargs") or {})


def decode(value: Any) -> Any:
    """``encode`` reversed: tagged objects back to their types."""
    if isinstance(value, list):
        return [decode(item) for item in value]
    if isinstance(value, dict):
        if value.keys() == {TYPE, VALUE}:
            decoder = DECODERS.get(value[TYPE])
            if decoder is None:
                raise ValueError(
                    f"Unknown tagged type {value[TYPE]!r} in a task's arguments or result; the "
                    f"known ones are {', '.join(sorted(DECODERS))}."
                )
            return decoder(value[VALUE])
        return {key: decode(item) for key, item in value.items()}
    return value
