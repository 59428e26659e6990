"""Canvas at the call site: ``chain`` and ``group`` of signatures (``handle.s(payload)``).

``chain(a.s(p1), b.s(p2))`` runs each member after the previous one succeeded, handing it the
previous result as ``ctx.previous``; ``group(a.s(p) for p in ps)`` runs them side by side and
its result is the list of theirs; ``chain(group(...), c.s(p))`` is a chord (``c`` reads the
group's results as ``ctx.previous``). ``.enqueue()`` admits one job of the built-in kind
``django_jobs.flow`` whose payload is the canvas as JSON; the flow runs it with durable
``spawn`` and ``gather`` steps, so every member is a child job of the flow (or of a child
flow, for a chain or group inside a group), and a crash anywhere replays from the steps.

Step names come from positions: a chain's link ``i`` is ``"i.spawn"`` then ``"i.gather"``
(nested: ``"1.0.spawn"``); a group spawns its members in runs of the same kind and options
(``"spawn.0"``, ``"spawn.1"``, ...) then gathers them all (``"gather"``).

What a Celery canvas means is kept: every member is a job of its own, keyed by its place in
the flow (``flow:<flow id>:<step>:<n>``), so equal members never dedupe against each other
(the flow's own key still dedupes the flow); the flow runs on its first member's queue and
engine unless ``enqueue(queue=)`` says otherwise, so a worker that serves only the members'
queue runs the whole flow; and the flow's ``expires`` applies to each member not started by
then as well.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import clock
from .durations import parse_duration
from .engine.rows.admission import check_options
from .exceptions import InvalidPayload
from .kinds.handle import JobHandle
from .kinds.registry import job, lookup
from .kinds.retry import Retry
from .kinds.signature import NOT_MEMBER_OPTIONS, Signature, decode_options, encode_options

if TYPE_CHECKING:
    from .models import Job

FLOW_KIND = "django_jobs.flow"


def _batched(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A group's members with each run of one kind and the same options stored once, as
    ``{"kind", "payloads": [...], "options"}``: a group of 10,000 small members stays well
    within ``JOBS["MAX_PAYLOAD_BYTES"]``."""
    out: list[dict[str, Any]] = []
    for node in nodes:
        last = out[-1] if out else None
        if (
            last is not None
            and "kind" in node
            and "kind" in last
            and last["kind"] == node["kind"]
            and last.get("options") == node.get("options")
        ):
            if "payload" in last:
                last["payloads"] = [last.pop("payload")]
            last["payloads"].append(node["payload"])
        else:
            out.append(dict(node))
    return out


class Canvas:
    """What ``chain`` and ``group`` build; ``enqueue`` admits it as one flow job."""

    form = ""

    def __init__(self, members: tuple[Any, ...]) -> None:
        if len(members) == 1 and not isinstance(members[0], Signature | Canvas):
            members = tuple(members[0])  # one iterable: group(a.s(p) for p in ps)
        for member in members:
            if not isinstance(member, Signature | Canvas):
                raise TypeError(
                    f"{self.form}() takes signatures (handle.s(payload)), chains and groups; "
                    f"got {member!r}."
                )
        self.members: tuple[Signature | Canvas, ...] = members

    def describe(self) -> dict[str, Any]:
        """The canvas as the flow's payload stores it."""
        return {self.form: [member.describe() for member in self.members]}

    def enqueue(
        self,
        *,
        owner: Any = None,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> Job:
        """Admit the flow job; each member is validated now (``UnknownKind``,
        ``InvalidPayload``). Its idempotency key defaults to a hash of the canvas: enqueueing
        the same canvas while its flow is live returns that flow (``job.deduped``)."""
        return lookup(FLOW_KIND).enqueue(
            self.describe(), owner=owner, tenant=tenant, idempotency_key=idempotency_key, **options
        )

    def as_user(self, user: Any, **options: Any) -> Job:
        return lookup(FLOW_KIND).as_user(user, self.describe(), **options)

    async def aenqueue(self, **options: Any) -> Job:
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue)(**options)

    def __repr__(self) -> str:
        return f"{self.form}({', '.join(repr(m) for m in self.members)})"


class Chain(Canvas):
    form = "chain"


class Group(Canvas):
    form = "group"

    def describe(self) -> dict[str, Any]:
        return {"group": _batched([member.describe() for member in self.members])}


def chain(*members: Any) -> Chain:
    """Run the members one after another; each reads the previous result as ``ctx.previous``."""
    return Chain(members)


def group(*members: Any) -> Group:
    """Run the members side by side; the result is the list of their results, in order."""
    return Group(members)


# -- validation ------------------------------------------------------------------------------


@functools.cache
def _enqueue_options() -> frozenset[str]:
    # What JobHandle.enqueue takes, read from it: an option added there works in a flow too.
    return frozenset(inspect.signature(JobHandle.enqueue).parameters) - {"self", "payload"}


def validate_canvas(node: Any, path: str = "flow", *, in_group: bool = False) -> None:
    """Raise ``InvalidPayload`` (``UnknownKind`` for a kind nobody registered) unless ``node``
    is a canvas whose every member's payload validates and whose key can be computed."""
    if not isinstance(node, dict):
        raise InvalidPayload(
            f"{path} is {node!r}; a flow's payload is a canvas: "
            '{"chain": [...]}, {"group": [...]} or {"kind": ..., "payload": ...}. '
            "Build it with django_jobs.chain / group."
        )
    forms = [form for form in ("chain", "group") if form in node]
    if forms:
        members = node[forms[0]]
        if len(node) != 1 or not isinstance(members, list):
            raise InvalidPayload(f"{path}: {{{forms[0]!r}: [members]}} takes nothing else.")
        for index, member in enumerate(members):
            validate_canvas(member, f"{path}.{forms[0]}[{index}]", in_group=forms[0] == "group")
        return
    batch = "payloads" in node
    unknown = set(node) - {"kind", "payloads" if batch else "payload", "options"}
    if unknown or not isinstance(node.get("kind"), str):
        raise InvalidPayload(
            f"{path} is not a member: a member is {{'kind': str, 'payload': ..., "
            f"'options': {{...}}}} (extra: {sorted(unknown)})."
        )
    if batch and not (in_group and isinstance(node["payloads"], list)):
        raise InvalidPayload(
            f"{path}: {{'kind', 'payloads': [...]}} (members of one kind side by side) belongs "
            "in a group, with a list of payloads."
        )
    handle = lookup(node["kind"])
    options = node.get("options") or {}
    if not isinstance(options, dict):
        raise InvalidPayload(f"{path}: options must be an object of enqueue options.")
    for name in options:
        if name in NOT_MEMBER_OPTIONS:
            raise InvalidPayload(
                f"{path} ({handle.kind}): {name}= is not for a flow's member (it carries the "
                "flow's owner and tenant, and the flow is its parent). Pass owner= and tenant= "
                "to the flow's enqueue()."
            )
        if name not in _enqueue_options():
            raise InvalidPayload(
                f"{path} ({handle.kind}): enqueue takes no option {name!r}; "
                f"it takes {', '.join(sorted(_enqueue_options() - set(NOT_MEMBER_OPTIONS)))}."
            )
    check_options(decode_options(options), what=f"{path} ({handle.kind})")
    payloads = node["payloads"] if batch else [node.get("payload")]
    for index, payload in enumerate(payloads):
        try:
            # Without ``input`` the check is JSON, which the flow's whole payload passes
            # already; a "payload" key is a hash of it, always computable.
            if handle.input is not None:
                handle.validate_payload(payload)
            if "idempotency_key" not in options and handle.idempotency_key != "payload":
                handle.key_for(payload)
        except InvalidPayload as exc:
            where = f"{path}.payloads[{index}]" if batch else path
            raise InvalidPayload(
                f"{where} ({handle.kind}): {exc.message}", errors=exc.errors
            ) from exc


def first_member_place(node: Any) -> tuple[str, str]:
    """Where a flow runs by default: its first member's queue and engine (the first link of
    a chain, the first member of a group, down to a signature); ``default`` for an empty
    canvas. The flow kind's ``place``, applied at admission by every door."""
    while isinstance(node, dict) and "kind" not in node:
        members = node.get("chain", node.get("group"))
        if not isinstance(members, list) or not members:
            return "default", "default"
        node = members[0]
    if not isinstance(node, dict) or not isinstance(node.get("kind"), str):
        return "default", "default"  # not a canvas: admission's validation says so
    handle = lookup(node["kind"])
    options = node.get("options")
    queue = options.get("queue") if isinstance(options, dict) else None
    return (queue if isinstance(queue, str) and queue else handle.queue), handle.engine


def checked_at_admission(payload: Any) -> None:
    """The flow's ``capture``: validates the canvas when the flow is admitted, by any door
    (``chain(...).enqueue()``, ``django_jobs.enqueue``, the API), and captures nothing. Not an
    ``input`` serializer: that would walk every member again on each of the flow's runs."""
    validate_canvas(payload)


# -- the flow ---------------------------------------------------------------------------------


@job(
    FLOW_KIND,
    idempotency_key="payload",
    label="Flow (chain, group)",
    group="django_jobs",
    capture=checked_at_admission,
    # Its own, not JOBS["DEFAULT_RETRY"]: a flow's body is durable steps, so running it again
    # after its worker was lost repeats nothing, and a project that runs its jobs once still
    # gets its flows through a worker's crash.
    retry=Retry(),
)
def run_flow(ctx: Any) -> Any:
    """Run the canvas in the payload; a flow spawned by a flow starts from its ``previous``."""
    return _run(ctx, ctx.payload, "", ctx.previous)


run_flow.place = first_member_place


def _run(ctx: Any, node: dict[str, Any], path: str, previous: Any) -> Any:
    if "chain" in node:
        for index, link in enumerate(node["chain"]):
            previous = _run(ctx, link, f"{path}{index}.", previous)
        return previous
    if "group" in node:
        ids: list[int] = []
        for index, run in enumerate(_runs(node["group"])):
            ids += _spawn(ctx, f"{path}spawn.{index}", run, previous)
        return ctx.step.gather(f"{path}gather", ids) if ids else []
    ids = _spawn(ctx, f"{path}spawn", [node], previous)
    return ctx.step.gather(f"{path}gather", ids)[0]


def _runs(members: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    """Consecutive members of one kind and the same options, spawned in one round trip; a
    chain or group inside a group runs as a flow of its own (a child flow)."""
    run: list[dict[str, Any]] = []
    for member in members:
        same = (
            run
            and "kind" in member
            and member["kind"] == run[0].get("kind")
            and member.get("options") == run[0].get("options")
        )
        if run and not same:
            yield run
            run = []
        run.append(member)
    if run:
        yield run


def _spawn(ctx: Any, name: str, run: list[dict[str, Any]], previous: Any) -> list[int]:
    first = run[0]
    if "kind" not in first:
        # A sub-flow's key names its place, so two equal sub-canvases are two flows.
        key = f"flow:{ctx.job.pk}:{name}"
        expires = _member_expiry(ctx.job.expires_at, {})
        return list(
            ctx.step.spawn(
                name, FLOW_KIND, first, previous=previous, idempotency_key=key, expires=expires
            )
        )
    options = decode_options(first.get("options"))
    payloads = [
        p
        for member in run
        for p in (member["payloads"] if "payloads" in member else [member.get("payload")])
    ]
    if "idempotency_key" not in options:
        # Each member is its own job, keyed by its place: equal members never collapse.
        options["idempotency_keys"] = [
            f"flow:{ctx.job.pk}:{name}:{n}" for n in range(len(payloads))
        ]
    options["expires"] = _member_expiry(ctx.job.expires_at, options)
    return list(ctx.step.spawn(name, first["kind"], payloads, previous=previous, **options))


def _member_expiry(flow_expires_at: datetime | None, options: dict[str, Any]) -> Any:
    """A member's ``expires``: its own, or the flow's instant when that comes first (the
    flow's ``expires`` applies to every member not started by then)."""
    own = options.get("expires")
    if flow_expires_at is None:
        return own
    if own is None:
        return flow_expires_at
    if not isinstance(own, datetime):
        when = options.get("run_at")
        if not isinstance(when, datetime):
            delay = options.get("delay")
            when = clock.now() + (parse_duration(delay, name="delay") if delay else timedelta())
        own = when + parse_duration(own, name="expires")
    return min(own, flow_expires_at)


__all__ = ["FLOW_KIND", "Chain", "Group", "chain", "encode_options", "group", "validate_canvas"]
