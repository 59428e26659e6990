"""Durable steps: ``ctx.step.run(name, fn)`` runs ``fn`` once ever and replays its result.

Step names are the replay key. Code outside steps runs again on every attempt; only what is
inside a completed step is skipped. A step's result is committed before the next step starts.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import FunctionType
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.utils.dateparse import parse_datetime

from .. import clock
from ..conf import jobs_settings
from ..durations import Duration, parse_duration
from ..exceptions import (
    InvalidPayload,
    InvalidResult,
    JobTimeout,
    StepDuplicate,
    StepNested,
    Uncertain,
)
from ..models import JobStep
from ..states import StepState
from ..store import get_store
from ..store.base import StepRow
from ..validation import storable_json, storable_text
from .emit import first_matching_event
from .suspend import Suspend
from .tracing import step as traced_step
from .tracing import step_replayed
from .workflows import gather as gather_children
from .workflows import spawn as spawn_children

if TYPE_CHECKING:
    from .context import JobContext

RECOVER = ("retry", "stop")


class LeaseLost(Exception):
    """This run no longer holds its job: its lease ran out and the job was re-asked.

    A worker cut off from the database (or stalled) past its lease comes back to a job that
    another worker has taken over; its step writes are refused, so that they cannot land over
    what the new run stored, and its run ends (its outcome is fenced out the same way).
    """


@dataclass(frozen=True)
class StepInfo:
    """Passed to an activity that takes one argument."""

    key: str
    """Stable across attempts: hand it to a provider for its own deduplication."""
    interrupted: bool
    """True when an earlier run of this activity was cut off by a crash."""
    attempt: int


class Steps:
    """``ctx.step``."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.alias = jobs_settings.DATABASE
        self._seen: set[str] = set()
        self._active: str | None = None
        self._rows: dict[str, JobStep] | None = None

    def _stored(self) -> dict[str, JobStep]:
        if self._rows is None and self._first_run():
            self._rows = {}
        if self._rows is None:
            rows = JobStep.objects.using(self.alias).filter(job_id=self.ctx.job.pk)
            self._rows = {row.name: row for row in rows}
        return self._rows

    def _enter(self, name: str) -> JobStep | None:
        if self._active is not None:
            raise StepNested(
                f"Step {name!r} was called inside step {self._active!r}. Steps run one at a "
                "time: call it after the outer step returns."
            )
        if name in self._seen:
            raise StepDuplicate(
                f"Step name {name!r} is used twice in one run of job #{self.ctx.job.pk}. Step "
                "names are the replay key: give each step its own name."
            )
        self._seen.add(name)
        return self._stored().get(name)

    def _first_run(self) -> bool:
        """Can no step of this job be stored yet? Then there is nothing to read.

        A run stores steps only while it holds its job, and every way back to a run goes
        through a field this checks: a claim from ``queued`` counts a new attempt (a failure's
        retry, a lost lease, ``retry``, ``retry(from_step=)`` and ``resolve`` all queue the job
        again: ``attempts`` 2 or more); a job that parked (``sleep``, ``wait_for_event``,
        ``gather``, ``requeue``, ``retry(children=True)``) is claimed from ``waiting`` with
        its ``wait_reason`` kept and its attempt unchanged; only ``hand_back`` takes an attempt
        back, from a job that never started. So a claimed attempt 1 with no ``wait_reason``
        is the job's first run.
        """
        job = self.ctx.job
        return job.worker_id is not None and job.attempts == 1 and job.wait_reason is None

    def _held(self) -> tuple[str, int] | None:
        """This run's hold on its job: (worker id, attempt); None when no worker runs it."""
        job = self.ctx.job
        if job.worker_id is None:
            return None
        return (job.worker_id, job.attempts)

    def _check_held(self) -> None:
        held = self._held()
        if held is not None and not get_store(self.alias).job_held(self.ctx.job.pk, held):
            raise self._lease_lost()

    def _lease_lost(self) -> LeaseLost:
        return LeaseLost(
            f"Job #{self.ctx.job.pk} is no longer held by this run (worker "
            f"{self.ctx.job.worker_id}, attempt {self.ctx.job.attempts}): its lease ran out and "
            "it was re-asked. This run's step writes are refused."
        )

    def _save(self, row: JobStep, fields: list[str]) -> None:
        """Write ``fields`` of ``row``, in one statement, only while this run holds its job."""
        held = self._held()
        written = get_store(self.alias).update_step(
            row.pk, {field: getattr(row, field) for field in fields}, job_id=row.job_id, held=held
        )
        if not written and held is not None:
            raise self._lease_lost()

    def _key(self, name: str) -> str:
        return f"{self.ctx.job.kind}:{self.ctx.job.pk}:{name}"

    def _insert(
        self,
        name: str,
        started_at: datetime,
        state: str = StepState.RUNNING,
        value: Any = None,
        error: str | None = None,
        ended_at: datetime | None = None,
    ) -> JobStep:
        """Insert step ``name``'s first attempt: ``running``, or, given ``state`` with its
        ``value`` or ``error`` and ``ended_at``, already ended."""
        new = StepRow(
            job_id=self.ctx.job.pk,
            name=name,
            seq=len(self._stored()),
            key=self._key(name),
            started_at=started_at,
            held=self._held(),
            state=state,
            value=value,
            error=error,
            ended_at=ended_at,
        )
        step_id = self._write_new(new)
        if step_id is None:
            raise self._lease_lost()
        row = JobStep.stored(self.alias, step_id, new)
        self._stored()[name] = row
        return row

    def _write_new(self, row: StepRow) -> int | None:
        """Insert ``row``, committed when this returns: through the worker's step writer,
        with other threads' rows in one commit (``engine.step_writer``), when there is one and
        no transaction of the runner's is open (a row written inside one must commit with
        it); otherwise on this thread's connection."""
        writer = self.ctx.live.step_writer
        if writer is not None and not connections[self.alias].in_atomic_block:
            return writer.insert(row)
        return get_store(self.alias).insert_steps([row])[0]

    def _begin(self, name: str, row: JobStep | None) -> JobStep:
        now = clock.now()
        if row is None:
            row = self._insert(name, now)
        else:
            row.state, row.attempts, row.started_at, row.error = (
                StepState.RUNNING,
                row.attempts + 1,
                now,
                None,
            )
            self._save(row, ["state", "attempts", "started_at", "error"])
        return row

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

    def _finish(self, row: JobStep, value: Any) -> None:
        row.state, row.value, row.ended_at = StepState.COMPLETED, value, clock.now()
        self._save(row, ["state", "value", "ended_at"])

    @staticmethod
    def _error(exc: BaseException) -> str:
        return storable_text(f"{type(exc).__name__}: {exc}")[:2000]

    def _fail(self, row: JobStep, exc: BaseException) -> None:
        row.state, row.error, row.ended_at = StepState.FAILED, self._error(exc), clock.now()
        self._save(row, ["state", "error", "ended_at"])

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
        self._active = name
        try:
            with traced_step(name):
                value = fn()
                self._check_json(name, value)
        except BaseException as exc:
            error = self._error(exc)
            self._insert(name, started, state=StepState.FAILED, error=error, ended_at=clock.now())
            raise
        finally:
            self._active = None
        self._insert(name, started, state=StepState.COMPLETED, value=value, ended_at=clock.now())
        return value

    # -- public -------------------------------------------------------------------------------

    def run(self, name: str, fn: Callable[..., Any], *, recover: str = "retry") -> Any:
        """Run ``fn`` once ever; on replay return its saved JSON result without calling it."""
        if recover not in RECOVER:
            raise ValueError(f'recover={recover!r}: use "retry" or "stop".')
        row = self._enter(name)
        if row is not None and row.state == StepState.COMPLETED:
            step_replayed(name)
            return row.value
        interrupted = row is not None and row.state in (StepState.RUNNING, StepState.UNKNOWN)
        if interrupted and recover == "stop" and row is not None:
            row.state = StepState.UNKNOWN
            self._save(row, ["state"])
            raise Uncertain(
                f"Step {name!r} was interrupted and may or may not have taken effect. Check it, "
                f"then `manage.py jobs resolve {self.ctx.job.pk} --step {name} --as completed` "
                "(or --as failed)."
            )
        if row is None and recover == "retry" and not self._takes_info(fn):
            return self._run_unwatched(name, fn)
        row = self._begin(name, row)
        info = StepInfo(key=row.key, interrupted=interrupted, attempt=row.attempts)
        self._active = name
        try:
            with traced_step(name):
                value = self._call(fn, info)
                self._check_json(name, value)
        except BaseException as exc:
            self._fail(row, exc)
            raise
        finally:
            self._active = None
        self._finish(row, value)
        return value

    def atomic(self, name: str, fn: Callable[..., Any]) -> Any:
        """Run ``fn`` in ``transaction.atomic()`` and save its result in that transaction."""
        row = self._enter(name)
        if row is not None and row.state == StepState.COMPLETED:
            step_replayed(name)
            return row.value
        self._active = name
        try:
            with transaction.atomic(using=self.alias):
                self._check_held()
                if row is not None:
                    # Read again, locked: a run that held the job before this one may have
                    # completed the step since this run read its steps.
                    row = get_store(self.alias).locked_step(row.pk)
                    self._stored()[name] = row
                    if row.state == StepState.COMPLETED:
                        step_replayed(name)
                        return row.value
                row = self._begin(name, row)
                info = StepInfo(key=row.key, interrupted=False, attempt=row.attempts)
                with traced_step(name):
                    value = self._call(fn, info)
                    self._check_json(name, value)
                self._finish(row, value)
        except BaseException:
            self._rows = None  # the rolled-back transaction may have undone our row
            raise
        finally:
            self._active = None
        return value

    def sleep(self, name: str, duration: Duration) -> None:
        """Suspend the job until the wake time: no worker, slot or attempt is held."""
        row = self._enter(name)
        if row is not None and row.state == StepState.COMPLETED:
            return
        now = clock.now()
        if row is None:
            wake = now + parse_duration(duration, name=f"step.sleep({name!r})")
            row = self._begin(name, None)
            row.value = {"wake_at": wake.isoformat()}
            self._save(row, ["value"])
        wake_at = parse_datetime((row.value or {}).get("wake_at", "")) or now
        if now >= wake_at:
            self._finish(row, None)
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
        row = self._enter(name)
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
            row = self._begin(name, row)
            row.value = {
                "event": event,
                "match": match,
                "deadline": deadline.isoformat() if deadline else None,
            }
            self._save(row, ["value"])
        spec = row.value or {}
        found = first_matching_event(
            event,
            match,
            since=self.ctx.job.created_at or now,
            after_id=self._consumed_event_id(),
            alias=self.alias,
        )
        if found is not None:
            self._finish(row, {"event": event, "event_id": found.pk, "data": found.data})
            return found.data
        deadline = parse_datetime(spec.get("deadline") or "")
        if deadline is not None and now >= deadline:
            error = JobTimeout(
                f"No {event!r} event matching {match!r} arrived within the timeout of step "
                f"{name!r}. Emit it, or raise the timeout."
            )
            self._fail(row, error)
            raise error
        what = f"event {event!r}" + (f" matching {json.dumps(match)}" if match is not None else "")
        raise Suspend(f"waiting in step {name!r} for {what}", deadline)

    def _consumed_event_id(self) -> int:
        """Events already taken by this job's earlier waits do not count twice."""
        ids = [
            row.value["event_id"]
            for row in self._stored().values()
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
