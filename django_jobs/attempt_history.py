"""A job's ``attempt_history`` as its JSON shows it: the keys of an entry, in order, and the
ones a member sees (``serialize`` shapes each view; ``store.base.history`` writes the entries)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.utils.dateparse import parse_datetime

#: An attempt's keys in the job's ``attempt_history`` (``store.base.history``), in order; a
#: member sees only ``MEMBER_ATTEMPT_KEYS`` of them (a worker's identity and a server's
#: traceback are operators' business).
ATTEMPT_KEYS = (
    "attempt",
    "started_at",
    "ended_at",
    "worker",
    "pid",
    "outcome",
    "error",
    "traceback",
)
MEMBER_ATTEMPT_KEYS = ("attempt", "started_at", "ended_at", "outcome", "error")


def _instant_text(value: Any) -> str | None:
    """A stored instant as the job JSON writes instants (UTC, ``isoformat``): SQLite keeps
    some as its own text (a rescue writes the row's ``started_at`` as it is)."""
    if not isinstance(value, str):
        return None
    parsed = parse_datetime(value.replace(" ", "T", 1))
    if parsed is None:
        return value
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).isoformat()


def attempt_history(entries: Any) -> list[dict[str, Any]]:
    """A job's stored ``attempt_history`` as its JSON shows it: each entry with every key of
    ``ATTEMPT_KEYS``, in order, its instants as the job's are written."""
    shown = []
    for entry in entries or ():
        if not isinstance(entry, dict):
            continue
        item = {key: entry.get(key) for key in ATTEMPT_KEYS}
        item["started_at"] = _instant_text(item["started_at"])
        item["ended_at"] = _instant_text(item["ended_at"])
        shown.append(item)
    return shown
