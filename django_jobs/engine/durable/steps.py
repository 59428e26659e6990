"""Durable steps: ``ctx.step.run(name, fn)`` runs ``fn`` once ever and replays its result.

Step names are the replay key. Code outside steps runs again on every attempt; only what is
inside a completed step is skipped. A step's result is committed before the next step starts.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils.dateparse import parse_datetime

from ... import clock
from ...durations import Duration, parse_duration
from ...exceptions import (
    InvalidPayload,
    InvalidResult,
    JobTimeout,
    Uncertain,
)
from ...states import StepState
from ...store import get_store
from ...validation import storable_json
from ..observe.tracing import step as traced_step
from ..observe.tracing import step_replayed
from .emit import first_matching_event
from .journal import Journal
from .suspend import Suspend
from .workflows import gather as gather_children
from .workflows import spawn as spawn_children

RECOVER = ("retry", "stop")


@dataclass(frozen=True)
class StepInfo:
    """Passed to an activity that takes one argument."""

    key: str
    """Stable across attempts: hand it to a provider for its own deduplication."""
    interrupted: bool
    """True when an earlier run of this activity was cut off by a crash."""
    attempt: int


class Steps(Journal):
    """``ctx.step``: the verbs a runner calls; the rows they keep are the ``Journal``'s."""

    @staticmethod
    def _takes_info(fn: Callable[..., Any]) -> bool:
        # ``fn(info)`` when it has a required positional parameter; ``fn()`` otherwise (so a
        # closure binding loop variables through defaults still works).
        if type(fn) is FunctionType and not fn.__dict__:
            # A plain function or lambda (nothing in its __dict__: no ``__wrapped__`` or
            # ``__signature__`` for ``inspect.signature`` to follow): the same answer from its
            # code, without building a Signature (about a fifth of a plain step's Python time
            # went there: docs/performance.md, "Durable steps: group commit").
            return fn.__code__.co_argcount > len(fn.__defaults__ or ())
        try:
            return any(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
                for p in inspect.signature(fn).parameters.values()
            )
        except (TypeError, ValueError):
            return False

    @classmethod
    def _call(cls, fn: Callable[..., Any], info: StepInfo) -> Any:
        return fn(info) if cls._takes_info(fn) else fn()

    def _check_json(self, name: str, value: Any) -> None:
        if value is None:  # the common result of a step run for its effect: JSON already
            return
        try:
            storable_json(value, what=f"value of step {name!r}")
        except InvalidPayload as exc:
            raise InvalidResult(
                f"Step {name!r} returned a value that cannot be stored; nothing was saved. "
                f"{exc.message}"
            ) from exc

    def _run_unwatched(self, name: str, fn: Callable[[], Any]) -> Any:
        """The first run of an activity that nothing watches while it runs, written once, at
        its end: one statement instead of two.

        Its ``running`` row would tell only a later run of the step that this one was cut
        off, and such a later run looks only when it hands ``StepInfo.interrupted`` to its
        activity or stops on it (``recover="stop"``). This activity does neither: after a
        crash mid-activity no row is left, and the next attempt runs it again, as it would
        after a ``running`` row.
        """
        started = clock.now()
        self.active = name
        try:
            with traced_step(name):
                value = fn()
                self._check_json(name, value)
        except BaseException as exc:
            error = self.error(exc)
            self.insert(name, started, state=StepState.FAILED, error=error, ended_at=clock.now())
            raise
        finally:
            self.active = None
        self.insert(name, started, state=StepState.COMPLETED, value=value, ended_at=clock.now())
        return value

    # -- public -------------------------------------------------------------------------------

    def run(self, name: str, fn: Callable[..., Any], *, recover: str = "retry") -> Any:
        """Run ``fn`` once ever; on replay return its saved JSON result without calling it."""
        if recover not in RECOVER:
            raise ValueError(f'recover={recover!r}: use "retry" or "stop".')
        row = self.enter(name)
        if row is not None and row.state == StepState.COMPLETED:
            step_replayed(name)
            return row.value
        interrupted = row is not None and row.state in (StepState.RUNNING, StepState.UNKNOWN)
        if interrupted and recover == "stop" and row is not None:
            row.state = StepState.UNKNOWN
            self.save(row, ["state"])
            raise Uncertain(
                f"Step {name!r} was interrupted and may or may not have taken effect. Check it, "
                f"then `manage.py jobs resolve {self.ctx.job.pk} --step {name} --as completed` "
                "(or --as failed)."
            )
        if row is None and recover == "retry" and not self._takes_info(fn):
            return self._run_unwatched(name, fn)
        row = self.begin(name, row)
        info = StepInfo(key=row.key, interrupted=interrupted, attempt=row.attempts)
        self.active = name
        try:
            with traced_step(name):
                value = self._call(fn, info)
                self._check_json(name, value)
        except BaseException as exc:
            self.fail(row, exc)
            raise
        finally:
            self.active = None
        self.finish(row, value)
        return value

    def atomic(self, name: str, fn: Callable[..., Any]) -> Any:
        """Run ``fn`` in ``transaction.atomic()`` and save its result in that transaction."""
        row = self.enter(name)
        if row is not None and row.state == StepState.COMPLETED:
            step_replayed(name)
            return row.value
        self.active = name
        try:
            with transaction.atomic(using=self.alias):
                self.check_held()
                if row is not None:
                    # Read again, locked: a run that held the job before this one may have
                    # completed the step since this run read its steps.
                    row = get_store(self.alias).locked_step(row.pk)
                    self.stored()[name] = row
                    if row.state == StepState.COMPLETED:
                        step_replayed(name)
                        return row.value
                row = self.begin(name, row)
                info = StepInfo(key=row.key, interrupted=False, attempt=row.attempts)
                with traced_step(name):
                    value = self._call(fn, info)
                    self._check_json(name, value)
                self.finish(row, value)
        except BaseException:
            self.rows = None  # the rolled-back transaction may have undone our row
            raise
        finally:
            self.active = None
        return value

    def sleep(self, name: str, duration: Duration) -> None:
        """Suspend the job until the wake time: no worker, slot or attempt is held."""
        row = self.enter(name)
        if row is not None and row.state == StepState.COMPLETED:
            return
        now = clock.now()
        if row is None:
            wake = now + parse_duration(duration, name=f"step.sleep({name!r})")
            row = self.begin(name, None)
            row.value = {"wake_at": wake.isoformat()}
            self.save(row, ["value"])
        wake_at = parse_datetime((row.value or {}).get("wake_at", "")) or now
        if now >= wake_at:
            self.finish(row, None)
            return
        raise Suspend(f"sleeping in step {name!r} until {wake_at.isoformat()}", wake_at)

    def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        match: Any = None,
        timeout: Duration | None = None,
    ) -> Any:
        """Suspend until ``emit(event, data)`` with ``data`` containing ``match``; return data.

        Events emitted since the job was admitted count, even before the wait began. Past
        ``timeout`` the step fails with ``JobTimeout`` (the job's retry policy applies).
        """
        row = self.enter(name)
        if row is not None and row.state == StepState.COMPLETED:
            value = row.value or {}
            return value.get("data") if isinstance(value, dict) and "event_id" in value else value
        now = clock.now()
        if row is None or row.state != StepState.RUNNING:
            deadline = (
                now + parse_duration(timeout, name=f"wait_for_event({name!r}) timeout")
                if timeout is not None
                else None
            )
            row = self.begin(name, row)
            row.value = {
                "event": event,
                "match": match,
                "deadline": deadline.isoformat() if deadline else None,
            }
            self.save(row, ["value"])
        spec = row.value or {}
        found = first_matching_event(
            event,
            match,
            since=self.ctx.job.created_at or now,
            after_id=self._consumed_event_id(),
            alias=self.alias,
        )
        if found is not None:
            self.finish(row, {"event": event, "event_id": found.pk, "data": found.data})
            return found.data
        deadline = parse_datetime(spec.get("deadline") or "")
        if deadline is not None and now >= deadline:
            error = JobTimeout(
                f"No {event!r} event matching {match!r} arrived within the timeout of step "
                f"{name!r}. Emit it, or raise the timeout."
            )
            self.fail(row, error)
            raise error
        what = f"event {event!r}" + (f" matching {json.dumps(match)}" if match is not None else "")
        raise Suspend(f"waiting in step {name!r} for {what}", deadline)

    def _consumed_event_id(self) -> int:
        """Events already taken by this job's earlier waits do not count twice."""
        ids = [
            row.value["event_id"]
            for row in self.stored().values()
            if row.state == StepState.COMPLETED
            and isinstance(row.value, dict)
            and "event_id" in row.value
        ]
        return max(ids, default=0)

    def spawn(self, name: str, handle: Any, payloads: Any, **options: Any) -> list[int]:
        """Start one child job per payload (a dict alone: one child); return their ids.

        The children are inserted in one round trip, in the transaction that records this
        step; on replay the stored ids come back and nothing is inserted. A child carries this
        job as ``parent``, and its owner and tenant; ``options`` are ``enqueue``'s (queue,
        priority, run_at, delay, idempotency_key, on_conflict), and ``previous=``, a JSON
        value each new child reads as ``ctx.previous``. See ``engine.workflows``.
        """
        return spawn_children(self, name, handle, payloads, **options)

    def gather(
        self,
        name: str,
        ids: list[int],
        *,
        timeout: Duration | None = None,
        failed: str = "raise",
    ) -> list[Any]:
        """Wait, without holding a slot, until every child in ``ids`` has ended; return their
        results in the order of ``ids``. A failed or cancelled child raises ``ChildFailed``
        (``failed="collect"``: a ``ChildResult`` per child instead); past ``timeout``,
        ``JobTimeout`` (the children keep running)."""
        return gather_children(self, name, ids, timeout=timeout, failed=failed)

    async def aspawn(self, name: str, handle: Any, payloads: Any, **options: Any) -> list[int]:
        return await sync_to_async(self.spawn)(name, handle, payloads, **options)

    async def agather(
        self,
        name: str,
        ids: list[int],
        *,
        timeout: Duration | None = None,
        failed: str = "raise",
    ) -> list[Any]:
        return await sync_to_async(self.gather)(name, ids, timeout=timeout, failed=failed)

    async def await_for_event(
        self, name: str, event: str, *, match: Any = None, timeout: Duration | None = None
    ) -> Any:
        return await sync_to_async(self.wait_for_event)(name, event, match=match, timeout=timeout)

    async def arun(self, name: str, fn: Callable[..., Any], *, recover: str = "retry") -> Any:
        if inspect.iscoroutinefunction(fn):
            raise TypeError("step.arun takes a sync activity; wrap async work in async_to_sync.")
        return await sync_to_async(self.run)(name, fn, recover=recover)

    async def aatomic(self, name: str, fn: Callable[..., Any]) -> Any:
        return await sync_to_async(self.atomic)(name, fn)

    async def asleep(self, name: str, duration: Duration) -> None:
        await sync_to_async(self.sleep)(name, duration)
