"""``task.s()``, ``.si()``, ``chain``, ``group``, ``chord`` and ``|``, with Celery's argument
passing, on the engine's durable flows (``django_jobs.canvas``).

A chain's link after the first gets the result before it as its first argument, unless it is
immutable (``.si()``); a chord's body gets the list of its header's results; a group after a
link hands that result to each of its members. Each member is a job of its own, a child of
the flow's job, and a crash replays the flow from its steps (docs/workflows.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .codec import encode
from .names import job_priority

if TYPE_CHECKING:
    from .. import canvas as flows
    from ..kinds.signature import Signature as NativeSignature
    from .names import TaskLike as Task
    from .result import AsyncResult

#: ``.set()``/``.s(**options)`` options a member keeps (as ``apply_async`` takes them).
MEMBER_OPTIONS = ("queue", "priority", "countdown", "expires")


class Canvas:
    """What ``|``, ``chain``, ``group`` and ``chord`` build."""

    def native(self, previous: bool) -> Any:
        raise NotImplementedError

    def __or__(self, other: Any) -> Chain:
        return Chain(self, other)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> AsyncResult:
        """Enqueue the flow: one job whose children are the members; its result is the last
        link's (a list for a group). ``args`` go first to the first member, as Celery's."""
        from .result import AsyncResult

        if args or kwargs:
            return self.clone_with(tuple(args or ()), dict(kwargs or {})).apply_async(**options)
        unknown = set(options) - {"queue", "priority", "countdown", "expires", "task_id"}
        if unknown:
            raise NotImplementedError(
                f"{type(self).__name__.lower()}.apply_async({', '.join(sorted(unknown))}=): "
                "a flow takes queue, priority, countdown, expires and task_id; set the others "
                "on its members."
            )
        native = self.native(previous=False)
        if options.get("priority") is not None:
            options["priority"] = job_priority(options["priority"])
        task_id = options.pop("task_id", None)
        countdown = options.pop("countdown", None)
        job = native.enqueue(
            idempotency_key=task_id or _unique(),
            delay=countdown,
            **options,
        )
        return AsyncResult.of(job, task_id=task_id)

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def clone_with(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Canvas:
        raise NotImplementedError


class Signature(Canvas):
    """``task.s(*args, **kwargs)``: one call of a task, not yet enqueued."""

    def __init__(
        self,
        task: Task,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        immutable: bool = False,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.immutable = immutable
        self.options = dict(options or {})

    def set(self, immutable: bool | None = None, **options: Any) -> Signature:
        if immutable is not None:
            self.immutable = immutable
        self.options.update(options)
        return self

    def clone(self, args: Any = None, kwargs: Any = None, **options: Any) -> Signature:
        return Signature(
            self.task,
            tuple(args or ()) + self.args if not self.immutable else self.args,
            {**self.kwargs, **dict(kwargs or {})},
            self.immutable,
            {**self.options, **options},
        )

    def clone_with(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Canvas:
        return self.clone(args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task here and now with these arguments first, as Celery's ``sig()``."""
        merged = self.clone(args, kwargs)
        return self.task(*merged.args, **merged.kwargs)  # type: ignore[operator]

    def describe(self) -> dict[str, Any]:
        """The signature as a payload keeps it (an errback of ``link_error``)."""
        return {
            "task": self.task.name,
            "args": encode(list(self.args)),
            "kwargs": encode(self.kwargs),
            "immutable": self.immutable,
        }

    @classmethod
    def described(cls, node: dict[str, Any]) -> Signature:
        from .codec import decode
        from .names import task

        return cls(
            task(node["task"]),
            tuple(decode(node.get("args") or [])),
            decode(node.get("kwargs") or {}),
            bool(node.get("immutable")),
        )

    def native(self, previous: bool) -> NativeSignature:
        payload: dict[str, Any] = {"args": encode(list(self.args)), "kwargs": encode(self.kwargs)}
        if previous and not self.immutable:
            payload["previous"] = True
        if self.options.get("link_error") is not None:
            payload["link_error"] = errbacks(self.options["link_error"])
        options = {k: v for k, v in self.options.items() if k in MEMBER_OPTIONS}
        if options.get("priority") is not None:
            options["priority"] = job_priority(options["priority"])
        if "countdown" in options:
            options["delay"] = options.pop("countdown")
        return self.task.handle.s(payload, **options)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> AsyncResult:
        merged = self.clone(args, kwargs)
        result: AsyncResult = self.task.apply_async(
            merged.args, merged.kwargs, **{**merged.options, **options}
        )
        return result

    def __repr__(self) -> str:
        arguments = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.task.name}{'si' if self.immutable else ''}({', '.join(arguments)})"


class Chain(Canvas):
    """``chain(a.s(), b.s())`` or ``a.s() | b.s()``: one after another."""

    tasks: tuple[Canvas, ...]

    def __init__(self, *tasks: Any) -> None:
        members: list[Canvas] = []
        for task in _flatten(tasks):
            members.extend(task.tasks if isinstance(task, Chain) else [task])
        if not members:
            raise TypeError("chain() takes at least one signature (task.s(...)).")
        self.tasks = tuple(members)

    def clone_with(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Canvas:
        first, *rest = self.tasks
        return Chain(first.clone_with(args, kwargs), *rest)

    def native(self, previous: bool) -> flows.Chain:
        from .. import canvas as flows

        return flows.chain(
            *(member.native(previous or index > 0) for index, member in enumerate(self.tasks))
        )


class Group(Canvas):
    """``group(a.s(1), a.s(2))``: side by side; its result is the list of theirs, in order."""

    def __init__(self, *tasks: Any) -> None:
        self.tasks = tuple(_flatten(tasks))
        if not self.tasks:
            raise TypeError("group() takes at least one signature (task.s(...)).")

    def clone_with(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Canvas:
        return Group(*(member.clone_with(args, kwargs) for member in self.tasks))

    def native(self, previous: bool) -> flows.Group:
        from .. import canvas as flows

        return flows.group(*(member.native(previous) for member in self.tasks))


class Chord(Canvas):
    """``chord(header)(body)`` or ``chord(header, body)``: the body runs once every header
    member succeeded, with the list of their results first; a member that fails fails the
    chord and the body never runs (``AsyncResult.get()`` raises ``ChordError``)."""

    def __init__(self, header: Any, body: Any = None) -> None:
        self.header = header if isinstance(header, Group) else Group(*_flatten([header]))
        self.body = body

    def __call__(self, body: Any = None, *args: Any, **kwargs: Any) -> AsyncResult:
        if body is not None and isinstance(body, Canvas):
            return Chord(self.header, body).apply_async(args, kwargs)
        return self.apply_async((body, *args) if body is not None else args, kwargs)

    def clone_with(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Canvas:
        return Chord(self.header.clone_with(args, kwargs), self.body)

    def native(self, previous: bool) -> flows.Chain:
        if self.body is None:
            raise TypeError("chord(header) needs its body: chord(header)(body.s()).")
        from .. import canvas as flows

        return flows.chain(self.header.native(previous), self.body.native(True))


def _flatten(tasks: Any) -> list[Canvas]:
    members: list[Canvas] = []
    for task in tasks:
        if isinstance(task, Canvas):
            members.append(task)
        elif isinstance(task, (list, tuple)) or hasattr(task, "__next__"):
            members.extend(_flatten(list(task)))
        else:
            raise TypeError(f"A canvas takes signatures (task.s(...)), not {task!r}.")
    return members


def _unique() -> str:
    import uuid

    return f"call:{uuid.uuid4().hex}"


def chain(*tasks: Any) -> Chain:
    return Chain(*tasks)


def group(*tasks: Any) -> Group:
    return Group(*tasks)


def chord(header: Any, body: Any = None) -> Chord:
    return Chord(header, body)


def signature(varies: Any, *args: Any, **kwargs: Any) -> Signature:
    if isinstance(varies, Signature):
        return varies.clone()
    if isinstance(varies, str):
        from .names import task

        return Signature(task(varies), tuple(args), kwargs)
    raise TypeError("signature() takes a task's name or a signature.")


def linked(
    task: Task, args: list[Any], kwargs: dict[str, Any], *, link: Any, link_error: Any
) -> AsyncResult:
    """``apply_async(link=sig)``: the call, then ``sig`` with its result, as one flow (its
    ``link_error`` stays the call's own)."""
    first = Signature(task, tuple(args), kwargs, options={"link_error": link_error})
    links = link if isinstance(link, (list, tuple)) else [link]
    if len(links) != 1:
        return Chain(first, Group(*links)).apply_async()
    return Chain(first, links[0]).apply_async()


def errbacks(link_error: Any) -> list[dict[str, Any]]:
    """``link_error=`` (a signature or a list of them) as the payload keeps it."""
    found = link_error if isinstance(link_error, (list, tuple)) else [link_error]
    for errback in found:
        if not isinstance(errback, Signature):
            raise TypeError(f"link_error= takes signatures (task.s(...)), not {errback!r}")
    return [errback.describe() for errback in found]
