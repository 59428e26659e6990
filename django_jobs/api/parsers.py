"""The request body: an oversized body is refused with 413 before it is parsed; a body
nested too deeply, or holding text no database stores (NUL, lone surrogates), with 400."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.parsers import JSONParser

from ..exceptions import InvalidPayload
from ..validation import MAX_DEPTH, key_problem, payload_limit, storable_json, storable_text
from .errors import InvalidRequestError, TooLargeError

#: Room for the fields around the payload (kind, run_at, idempotency_key, ...).
ENVELOPE_BYTES = 16 * 1024


def body_limit() -> int | None:
    """The largest body the API reads: the payload limit plus the envelope, in bytes."""
    limit = payload_limit()
    if limit is not None:
        return limit + ENVELOPE_BYTES
    fallback = getattr(settings, "DATA_UPLOAD_MAX_MEMORY_SIZE", None)
    return int(fallback) if fallback else None


def body_too_large(limit: int, size: int | None = None) -> TooLargeError:
    told = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return TooLargeError(
        f"The request body is {told}; "
        f"this API reads at most {limit} bytes "
        '(JOBS["MAX_PAYLOAD_BYTES"] for the payload plus room for the other fields). '
        "Store large data elsewhere and pass a reference in the payload.",
        code="BODY_TOO_LARGE",
    )


def check_content_length(meta: dict[str, Any]) -> None:
    """Refuse a declared Content-Length over the limit, before anything is read."""
    limit = body_limit()
    if limit is None:
        return
    try:
        size = int(meta.get("CONTENT_LENGTH") or 0)
    except (TypeError, ValueError):
        return
    if size > limit:
        raise body_too_large(limit, size)


class BoundedJSONParser(JSONParser):
    """JSON, read at most up to the body limit (covers bodies without a Content-Length)."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = body_limit()
        if limit is not None and stream is not None:
            raw = stream.read(limit + 1)
            if len(raw) > limit:
                raise body_too_large(limit)
            stream = io.BytesIO(raw)
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise InvalidRequestError(
                f"The body is nested too deeply; JSON values may nest at most {MAX_DEPTH} "
                "levels. Flatten the payload, or store the structure elsewhere and pass a "
                "reference.",
                code="TOO_DEEP",
            ) from None
        check_body(data)
        return data


def check_body(data: Any) -> None:
    """Refuse, naming the fields, what no stored row may hold (``django_jobs.validation``).

    Done on the whole body before any serializer sees it, so no error message echoes such
    text back (which would break the response itself)."""
    errors: dict[str, list[str]] = {}
    fields = data.items() if isinstance(data, dict) else [("non_field_errors", data)]
    for name, value in fields:
        shown = storable_text(name)
        problem = key_problem(name) if shown != name else None
        if problem is not None:
            errors[shown] = [f"This field name is not text a database can store: {problem}"]
            continue
        try:
            storable_json(value, what=f"{name} field")
        except InvalidPayload as exc:
            errors[shown] = [exc.message]
    if errors:
        raise InvalidRequestError(errors=errors)


def check_json_body(request: Any) -> None:
    """Refuse (415) a state-changing request whose body is not declared JSON, even an empty
    one: what a cross-site form (urlencoded, multipart, text/plain) or a beacon (no type) can
    send never reaches a view, whatever credentials the browser adds (docs/security.md)."""
    declared = request.content_type or ""
    media_type = declared.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType(
            declared or "(none)",
            detail=f"Content-Type {declared or '(none)'}: this API reads JSON bodies only, "
            "an empty body too.",
        )
