"""Workflows: ``ctx.step.spawn`` starts child jobs, ``ctx.step.gather`` waits for them.

Both are durable steps. ``spawn`` inserts the children (one batch, one round trip), counts them
on the parent's row and records the step with their ids, all in one transaction: a crash leaves
either every child and the step, or neither. A child's end decrements the parent's count in the
transaction recording that end, and the end that brings it to zero wakes the parent, so
``gather`` never polls for the children it owns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from ... import clock
from ...conf import jobs_settings
from ...durations import Duration, parse_duration
from ...exceptions import ChildFailed, JobTimeout, UnknownKind
from ...kinds.handle import JobHandle
from ...kinds.registry import get
from ...models import Job, JobStep
from ...serialize import public_error
from ...signals import children_spawned
from ...states import JobState, StepState
from ...store import get_store
from ..observe.tracing import link_children
from ..rows.admission import admit
from .suspend import Suspend

if TYPE_CHECKING:
    from .journal import Journal

#: Children read per query by ``gather``: a fan-out of 10,000 is ten reads, not one huge one.
PAGE = 1000
#: How often ``gather`` re-checks a child it does not own (a spawn deduped onto a job that
#: already had another parent): that child's end wakes its own parent only.
FOREIGN_RECHECK = timedelta(seconds=5)
FAILED = ("raise", "collect")


@dataclass(frozen=True)
class ChildResult:
    """One child's outcome, as ``gather(..., failed="collect")`` returns it."""

    id: int
    state: str
    """``succeeded``, ``failed`` or ``cancelled``."""
    result: Any
    """The child's result (None unless it succeeded)."""
    error: str | None
    """The child's error (None when it succeeded). When the parent has an owner, what its owner
    is shown of that error (``serialize.public_error``: no traceback), since the parent's result
    may carry it to the owner; operators read the whole error on the child job."""

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "result": self.result, "error": self.error}


def _handle(handle: JobHandle | str) -> JobHandle:
    if isinstance(handle, JobHandle):
        return handle
    found = get(handle)
    if found is None:
        raise UnknownKind(f"No job is registered as {handle!r}; check the kind's name.")
    return found


def _payloads(payloads: Any) -> list[Any]:
    # A dict alone is one child's payload; any other iterable, one child per item.
    if isinstance(payloads, dict) or not isinstance(payloads, Iterable):
        return [payloads]
    return list(payloads)


#: The step, stored with a child, that holds its ``ctx.previous`` (``spawn(..., previous=)``).
PREVIOUS_STEP = "django_jobs.previous"


def spawn(
    steps: Journal,
    name: str,
    handle: JobHandle | str,
    payloads: Any,
    *,
    previous: Any = None,
    **options: Any,
) -> list[int]:
    """``ctx.step.spawn``: insert one child per payload; return their ids (stored on replay).

    ``previous``: handed to each new child as ``ctx.previous`` (what a ``chain`` passes on),
    stored with it as a completed step named ``django_jobs.previous``, in the spawn's
    transaction."""
    for option in ("owner", "tenant", "parent"):
        if option in options:
            raise TypeError(
                f"step.spawn takes no {option}=: a child carries its parent's owner and tenant."
            )
    handle = _handle(handle)
    rows = _payloads(payloads)
    row = steps.enter(name)
    if row is not None and row.state == StepState.COMPLETED:
        return list(row.value or [])
    job = steps.ctx.job
    store = get_store(steps.alias)
    steps.active = name
    try:
        with transaction.atomic(using=steps.alias):
            row = steps.begin(name, row)
            children = admit(
                handle, rows, owner=job.owner_id, tenant=job.tenant, parent=job.pk, **options
            )
            ids = [child.pk for child in children]
            if previous is not None:
                _hand_previous(steps.alias, children, previous)
            counted = _count(store, job.pk, children)
            if counted:
                store.add_children(job.pk, counted)
                job.children_pending += counted
                job.children_total += counted
            children_spawned.send(sender=Job, parent=job, children=children)
            steps.finish(row, ids)
    except BaseException:
        steps.rows = None  # the rolled-back transaction may have undone our row
        raise
    finally:
        steps.active = None
    return ids


def _hand_previous(alias: str, children: list[Job], previous: Any) -> None:
    """Store ``previous`` with each new child (a deduped one already had its own start)."""
    now = clock.now()
    JobStep.objects.using(alias).bulk_create(
        JobStep(
            job_id=child.pk,
            name=PREVIOUS_STEP,
            key=f"{child.kind}:{child.pk}:{PREVIOUS_STEP}",
            state=StepState.COMPLETED,
            value=previous,
            attempts=1,
            started_at=now,
            ended_at=now,
        )
        for child in children
        if not child.deduped
    )


def read_previous(job: Job) -> Any:
    """The ``ctx.previous`` stored with ``job`` by its parent's spawn (None: none was)."""
    alias = jobs_settings.DATABASE
    row = (
        JobStep.objects.using(alias)
        .filter(job_id=job.pk, name=PREVIOUS_STEP)
        .values_list("value", flat=True)
        .first()
    )
    return row


def _count(store: Any, parent_id: int, children: list[Job]) -> int:
    """How many of ``children`` will wake this parent: each new child once, and each deduped
    live job that had no parent (adopted now). A deduped job of another parent is not
    counted: a job has one parent, whom alone its end wakes (``gather`` re-checks it)."""
    new = {child.pk for child in children if not child.deduped}
    deduped = sorted({child.pk for child in children if child.deduped} - new)
    adopted = store.adopt(parent_id, deduped) if deduped else []
    return len(new) + len(adopted)


def gather(
    steps: Journal,
    name: str,
    ids: list[int],
    *,
    timeout: Duration | None = None,
    failed: str = "raise",
) -> list[Any]:
    """``ctx.step.gather``: the children's results in the order of ``ids``, once all ended."""
    if failed not in FAILED:
        raise ValueError(f'failed={failed!r}: use "raise" or "collect".')
    ids = [int(i) for i in ids]
    row = steps.enter(name)
    job = steps.ctx.job
    owned = job.owner_id is not None
    if row is not None and row.state == StepState.COMPLETED:
        return _replayed(row.value, failed, owned)
    now = clock.now()
    if row is None or row.state != StepState.RUNNING:
        deadline = (
            now + parse_duration(timeout, name=f"gather({name!r}) timeout")
            if timeout is not None
            else None
        )
        row = steps.begin(name, row)
        row.value = {"deadline": deadline.isoformat() if deadline else None}
        steps.save(row, ["value"])  # fenced by the lease, as every step write
    deadline = parse_datetime((row.value or {}).get("deadline") or "")
    pending, foreign = _pending(ids, job.pk, steps.alias)
    if pending:
        if deadline is not None and now >= deadline:
            expired = JobTimeout(
                f"{pending} of {len(ids)} children of step {name!r} had not ended within its "
                "timeout; they keep running. Raise the timeout, or gather them again."
            )
            steps.fail(row, expired)
            raise expired
        # Woken by the last owned child's end; a child we do not own is re-checked.
        wake = now + FOREIGN_RECHECK if foreign else None
        if deadline is not None and (wake is None or deadline < wake):
            wake = deadline
        raise Suspend(f"waiting for {pending} of {len(ids)} children in step {name!r}", wake)
    outcomes = _outcomes(ids, steps.alias, owned)
    if failed == "collect":
        value = [outcomes[i].as_json() for i in ids]
        steps.finish(row, value)
        return [outcomes[i] for i in ids]
    bad = [i for i in dict.fromkeys(ids) if outcomes[i].state != JobState.SUCCEEDED]
    if bad:
        shown = ", ".join(f"#{i} ({outcomes[i].state})" for i in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        error = ChildFailed(
            f"{len(bad)} of {len(ids)} children of step {name!r} did not succeed: {shown}{more}. "
            "Fix the cause, then retry this job with its children (`manage.py jobs retry ID "
            '--children`), or gather with failed="collect" to handle them.',
            failed=bad,
        )
        steps.fail(row, error)
        raise error
    value = [outcomes[i].result for i in ids]
    steps.finish(row, value)
    return value


def _replayed(value: Any, failed: str, owned: bool) -> list[Any]:
    if failed == "collect":
        # Stored before errors were stored as the owner's view: shown as it, all the same.
        return [
            ChildResult(**{**item, "error": _shown(item.get("error"), owned)})
            for item in value or []
        ]
    return list(value or [])


def _pages(ids: list[int]) -> Iterable[list[int]]:
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), PAGE):
        yield unique[start : start + PAGE]


def _pending(ids: list[int], parent_id: int, alias: str) -> tuple[int, bool]:
    """How many of ``ids`` have not ended, and whether one of those is not this job's child.

    A child pruned away (absent) counts as ended: nothing would ever wake the wait for it."""
    pending, foreign = 0, False
    store = get_store(alias)
    for page in _pages(ids):
        for owner in store.unended_parents(page):
            pending += 1
            foreign = foreign or owner != parent_id
    return pending, foreign


def _shown(error: str | None, owned: bool) -> str | None:
    """A child's error as a parent with an owner (``owned``) carries it: the owner's view."""
    return public_error(error) if owned else error


def _outcomes(ids: list[int], alias: str, owned: bool) -> dict[int, ChildResult]:
    found: dict[int, ChildResult] = {}
    traced: list[Any] = []
    store = get_store(alias)
    for page in _pages(ids):
        for job_id, state, result, error, trace_context in store.outcomes_of(page):
            found[job_id] = ChildResult(
                job_id,
                state,
                result if state == JobState.SUCCEEDED else None,
                _shown(error, owned),
            )
            if trace_context is not None:
                traced.append(trace_context)
    link_children(traced)  # tracing: the attempt links to the children's last attempts
    for job_id in ids:
        # A child deleted (pruned) after it ended: its outcome is gone.
        found.setdefault(
            job_id, ChildResult(job_id, JobState.CANCELLED, None, "the job was deleted")
        )
    return found
