"""What the engine asks of the store besides new jobs: a claim, a run's outcome, a step's
first write (plain dataclasses, passed in)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...states import StepState


@dataclass(kw_only=True)
class Outcome:
    """The end of one execution of a claimed job, written by ``Store.record``."""

    job_id: int
    worker_id: str
    state: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    result: Any = None
    error: str | None = None
    run_at: datetime | None = None
    wait_reason: str | None = None
    progress: Any = None
    log: list[str] | None = None
    events: list[str] = field(default_factory=list)
    #: The job's trace context with its last attempt's span in it (``engine.tracing``), to
    #: store with the outcome; None (untraced): the column is left as it is.
    trace_context: dict[str, str] | None = None
    #: Called inside the transaction that records this outcome, once it is written (the jobs
    #: a run enqueued with ``after_current=True``, admitted as the run's success is recorded).
    then: Callable[[], None] | None = None
    #: The attempt's number (the job's ``attempts`` when it ran), the id of the process that
    #: ran it (None: not known), and how it ended when its state does not say it all ("lost",
    #: "timed_out"; ``states.AttemptOutcome``): its entry in the job's history.
    attempt: int | None = None
    pid: int | None = None
    label: str | None = None


@dataclass(kw_only=True)
class ClaimSkip:
    """What a claim must pass over: queues and tenants at their cap, kinds and queues over
    their rate. ``fair`` picks round-robin across tenants (first due job of each tenant,
    then the second, ...) so one tenant's backlog never starves another. ``paused``: the
    paused queues of a claim across engines, as ``(engine, queue)`` pairs."""

    queues: list[str] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    paused: list[tuple[str, str]] = field(default_factory=list)
    fair: bool = False


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What a worker asks of ``Store.claim``: up to ``limit`` jobs due at ``now`` (which also
    becomes their ``started_at``), of ``engine`` (any engine if None) and ``queues`` (any queue
    if None), marked ``running`` for ``worker_id`` with a lease until ``leased_until``, passing
    over what ``skip`` names (caps and rates, ``engine.limits``)."""

    engine: str | None
    worker_id: str
    limit: int
    now: datetime
    leased_until: datetime
    queues: list[str] | None = None
    skip: ClaimSkip | None = None


@dataclass(slots=True, kw_only=True)
class StepRow:
    """A step's first attempt, to insert (``Store.insert_steps``): ``running``, or, written
    once at its end, ``completed`` with its ``value`` or ``failed`` with its ``error``. Only
    while ``held`` (worker id, attempt) still holds the job; None: no fence (no worker)."""

    job_id: int
    name: str
    seq: int
    key: str
    started_at: datetime
    held: tuple[str, int] | None
    state: str = StepState.RUNNING
    value: Any = None
    error: str | None = None
    ended_at: datetime | None = None
