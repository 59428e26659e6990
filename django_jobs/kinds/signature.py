"""``handle.s(payload, **options)``: a kind, a payload and enqueue options, not yet enqueued.

Signatures are the members of ``chain`` and ``group`` (``django_jobs.canvas``); ``describe()``
is the JSON a flow stores for each (datetimes as ``{"datetime": ISO}``, durations as seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.utils.dateparse import parse_datetime

if TYPE_CHECKING:
    from ..models import Job


class Signable(Protocol):
    """What a signature needs of its kind's ``JobHandle`` (which imports this module)."""

    @property
    def kind(self) -> str: ...

    @property
    def enqueue(self) -> Callable[..., Job]: ...


#: Options a flow's member cannot take: it carries the flow's owner and tenant, the flow is
#: its parent, and it is admitted by the flow, never "behind" the caller.
NOT_MEMBER_OPTIONS = ("owner", "tenant", "parent", "after_current")


@dataclass(frozen=True)
class Signature:
    """One job to enqueue: ``enqueue()`` it alone, or put it in a ``chain`` or a ``group``."""

    handle: Signable
    payload: Any
    options: dict[str, Any]

    def enqueue(self, **options: Any) -> Job:
        """Enqueue it alone; ``options`` add to (and override) those given to ``s()``."""
        return self.handle.enqueue(self.payload, **{**self.options, **options})

    def describe(self) -> dict[str, Any]:
        """The member as a flow stores it: ``{"kind", "payload", "options"}``."""
        node: dict[str, Any] = {"kind": self.handle.kind, "payload": self.payload}
        if self.options:
            node["options"] = encode_options(self.options)
        return node

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"{self.handle.kind}.s({self.payload!r}{options})"


def encode_options(options: dict[str, Any]) -> dict[str, Any]:
    """Enqueue options as JSON: an aware datetime as ``{"datetime": ISO}``, a timedelta as
    its seconds (every duration option takes a number of seconds)."""
    encoded: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValueError(
                    f"{name}={value!r} is naive; pass an aware datetime "
                    "(django.utils.timezone.make_aware)."
                )
            value = {"datetime": value.isoformat()}
        elif isinstance(value, timedelta):
            value = value.total_seconds()
        encoded[name] = value
    return encoded


def decode_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """``encode_options`` reversed."""
    decoded: dict[str, Any] = {}
    for name, value in (options or {}).items():
        if isinstance(value, dict) and set(value) == {"datetime"}:
            value = parse_datetime(value["datetime"])
        decoded[name] = value
    return decoded
