"""Operator actions and introspection, shared by the admin, the API and the CLI."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, OperationalError, connections, transaction
from django.db.models import F

from . import clock
from .conf import jobs_settings
from .engine.rows import fleet
from .engine.rows.publish import publish_after_commit
from .exceptions import (
    InvalidPayload,
    JobDuplicate,
    JobNotFound,
    NotCancellable,
    NotRetryable,
    RetryNotAllowed,
    UnknownEngine,
    UnknownStep,
)
from .kinds.registry import all_handles, get
from .models import Job, JobStep
from .observability.stats import queue_stats
from .permissions import retry_refusal
from .serialize import job_detail_json, job_json
from .states import ENDED_STATES, RETRYABLE_STATES, JobState, StepState
from .store import Claim, get_store
from .store.base import ClaimSkip
from .validation import check_json, check_label


def _locked(job_id: int) -> Job:
    try:
        return get_store().locked(job_id)
    except Job.DoesNotExist:
        raise JobNotFound(
            f"No job has id {job_id}. `manage.py jobs list` shows the recent ones."
        ) from None


#: PostgreSQL's "deadlock detected": the transaction was rolled back and may simply run again.
DEADLOCK = "40P01"


def cancel(job_id: int) -> dict[str, Any]:
    """Cancel a job: at once unless it is running. A running job's ``cancel_requested`` is
    set and its worker told (on PostgreSQL by a NOTIFY sent on commit; on SQLite the worker
    reads it at its poll interval): its runner sees ``ctx.cancelled`` within about a second,
    and the job JSON returned says ``cancel_requested`` until the job ends.

    Its children that have not ended are cancelled too, down the tree, in the same transaction.
    That transaction locks the parent, then its children; a worker recording a child's end
    locks them the other way round, so PostgreSQL may pick the cancel as a deadlock's victim:
    it is rolled back whole and run again (unless it runs inside the caller's transaction,
    which the deadlock aborted: then the error is the caller's to handle).
    """
    retry_deadlock = not connections[jobs_settings.DATABASE].in_atomic_block
    for attempt in range(3):
        try:
            return _cancel(job_id)
        except OperationalError as exc:
            deadlock = getattr(exc.__cause__, "sqlstate", None) == DEADLOCK
            if not (deadlock and retry_deadlock) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _cancel(job_id: int) -> dict[str, Any]:
    alias = jobs_settings.DATABASE
    store = get_store(alias)
    with transaction.atomic(using=alias):
        job = _locked(job_id)
        if job.state in ENDED_STATES:
            raise NotCancellable(
                f"Job #{job.pk} has already ended ({job.state}); there is nothing to cancel."
            )
        now = clock.now()
        if job.state == JobState.RUNNING:
            job.cancel_requested = True
            job.save(using=alias, update_fields=["cancel_requested"])
            if job.worker_id:
                store.notify_cancel([(job.worker_id, job.pk)])
        else:
            # Ending the row also disarms a waiting job's re-ask: nothing claims it again.
            job.state, job.ended_at, job.wait_reason = JobState.CANCELLED, now, None
            job.cancel_requested = False
            job.save(
                using=alias,
                update_fields=["state", "ended_at", "wait_reason", "cancel_requested"],
            )
            store.children_ended([job.parent_id], now)
            publish_after_commit("job.cancelled", job, alias=alias)
        if job.children_total:
            _cancel_tree(store, job.pk, now, alias)
    return job_json(job)


def _cancel_tree(store: Any, root_id: int, now: datetime, alias: str) -> None:
    """Cancel the live descendants of ``root_id``, level by level (each job visited once)."""
    seen, pending = {root_id}, [root_id]
    while pending:
        parent_id = pending.pop()
        cancelled, parents = store.cancel_children(parent_id, now)
        for child in cancelled:
            publish_after_commit("job.cancelled", child, alias=alias)
        for child_id in parents:
            if child_id not in seen:
                seen.add(child_id)
                pending.append(child_id)


def check_retry(
    user: Any, job: Job, from_step: str | None = None, *, children: bool = False
) -> None:
    """Raise ``RetryNotAllowed`` unless ``user`` may retry ``job`` (from ``from_step``, with
    its ``children``)."""
    refusal = retry_refusal(
        user, job.owner_id, get(job.kind), from_step=from_step, children=children
    )
    if refusal is not None:
        raise RetryNotAllowed(refusal)


def retry(
    job_id: int, from_step: str | None = None, *, by: Any = None, children: bool = False
) -> dict[str, Any]:
    """Queue a failed, blocked or cancelled job again with a fresh set of attempts.

    ``children``: also retry its failed and cancelled children (and theirs, down the tree);
    the job then waits for them (``waiting``), and its ``gather`` reads them again once they
    have ended. Without failed or cancelled children it is a plain retry.

    ``by``: the user asking (the API and the admin pass theirs); the retry rule of
    ``permissions.retry_refusal`` is checked for them (``RetryNotAllowed``). ``None`` is
    the trusted caller: Python code and ``manage.py jobs``, which run as the deployment.
    """
    alias = jobs_settings.DATABASE
    try:
        with transaction.atomic(using=alias):
            job = _locked(job_id)
            if by is not None:
                check_retry(by, job, from_step, children=children)
            if job.state not in RETRYABLE_STATES:
                hint = (
                    " Resolve its unknown step first (`manage.py jobs resolve`)."
                    if job.state == JobState.UNKNOWN
                    else ""
                )
                raise NotRetryable(
                    f"Job #{job.pk} is {job.state}; only failed, blocked or cancelled jobs can "
                    f"be retried.{hint}"
                )
            if from_step is not None:
                _reset_steps_from(job, from_step, alias)
            retried = _retry_children(job, alias, {job.pk}) if children else 0
            if job.parent_id is not None and job.state in ENDED_STATES:
                # Its end was counted on its parent: it is pending there again.
                Job.objects.using(alias).filter(pk=job.parent_id).update(
                    children_pending=F("children_pending") + 1
                )
            _requeue(job, alias, waiting_for=retried)
    except IntegrityError:
        raise JobDuplicate(
            f"Job #{job_id} cannot be retried: another live job holds its idempotency key. "
            "Let that one finish or cancel it first."
        ) from None
    return job_json(job)


def _requeue(job: Job, alias: str, *, waiting_for: int = 0) -> None:
    """Put an ended (or blocked) job back with a fresh set of attempts: ``queued`` now, or,
    with ``waiting_for`` children retried, ``waiting`` until the last of them ends."""
    handle = get(job.kind)
    job.error, job.ended_at, job.cancel_requested = None, None, False
    job.expires_at = None  # retried by hand: it runs, even if it had expired
    if waiting_for:
        job.state, job.run_at = JobState.WAITING, None
        job.wait_reason = f"waiting for {waiting_for} retried children"
    else:
        job.state, job.run_at, job.wait_reason = JobState.QUEUED, clock.now(), None
    job.max_attempts = job.attempts + (handle.retry.attempts if handle else 1)
    if handle is not None:
        job.version = handle.version
    job.save(using=alias)
    if not waiting_for:
        get_store(alias).notify({job.engine})
    publish_after_commit("job.retrying", job, alias=alias)


def _retry_children(job: Job, alias: str, seen: set[int]) -> int:
    """Retry the failed and cancelled children of ``job`` (theirs first, down the tree) and
    count them as pending on ``job`` again; return how many. Children still live are
    already counted; succeeded ones keep their results."""
    if not job.children_total:
        return 0
    kids = get_store(alias).locked_children(job.pk, [JobState.FAILED, JobState.CANCELLED])
    kids = [kid for kid in kids if kid.pk not in seen]
    for kid in kids:
        seen.add(kid.pk)
        _requeue(kid, alias, waiting_for=_retry_children(kid, alias, seen))
    if kids:
        Job.objects.using(alias).filter(pk=job.pk).update(
            children_pending=F("children_pending") + len(kids)
        )
        job.children_pending += len(kids)
    return len(kids)


def check_from_step(job: Job, name: str) -> list[JobStep]:
    """The steps of ``job`` from ``name`` on, in the order they ran; ``UnknownStep`` if it has
    no step of that name. The one check of ``from_step``, whichever surface asks."""
    steps = list(
        JobStep.objects.using(jobs_settings.DATABASE).filter(job=job).order_by("seq", "id")
    )
    names = [s.name for s in steps]
    if name not in names:
        listed = ", ".join(repr(n) for n in names)
        hint = (
            f"its steps, in the order they ran: {listed}. Retry from one of them, or without "
            "from_step"
            if names
            else "it has no stored steps. Retry it without from_step"
        )
        raise UnknownStep(f"Job #{job.pk} has no step {name!r}; {hint}.", step=name, steps=names)
    return steps[names.index(name) :]


def _reset_steps_from(job: Job, name: str, alias: str) -> None:
    forgotten = check_from_step(job, name)
    JobStep.objects.using(alias).filter(pk__in=[s.pk for s in forgotten]).delete()


def resolve(job_id: int, step: str, as_: str, value: Any = None) -> dict[str, Any]:
    """Settle an ``unknown`` step by hand: ``completed`` (with ``value``) or ``failed``."""
    if as_ not in (StepState.COMPLETED, StepState.FAILED):
        raise ValueError('as_ must be "completed" or "failed".')
    check_json(value, what=f"value of step {step!r}")
    alias = jobs_settings.DATABASE
    with transaction.atomic(using=alias):
        job = _locked(job_id)
        try:
            row = JobStep.objects.using(alias).get(job=job, name=step)
        except JobStep.DoesNotExist:
            raise NotRetryable(f"Job #{job.pk} has no step {step!r}.") from None
        now = clock.now()
        if as_ == StepState.COMPLETED:
            row.state, row.value, row.error = StepState.COMPLETED, value, None
        else:
            row.state, row.error = StepState.FAILED, "resolved as failed by an operator"
        row.ended_at = now
        row.save(using=alias)
        if job.state == JobState.UNKNOWN:
            if as_ == StepState.COMPLETED:
                job.state, job.run_at, job.error = JobState.QUEUED, now, None
                job.max_attempts = max(job.max_attempts, job.attempts + 1)
            else:
                job.state, job.ended_at = JobState.FAILED, now
                job.error = f"Step {step!r} was resolved as failed by an operator."
            job.save(using=alias)
            # As ``retry`` does: idle workers wake for the queued job, and its watchers hear
            # of the change (``job.retrying`` or ``job.failed``).
            if job.state == JobState.QUEUED:
                get_store(alias).notify({job.engine})
                publish_after_commit("job.retrying", job, alias=alias)
            else:
                get_store(alias).children_ended([job.parent_id], now)  # an end, as any other
                publish_after_commit("job.failed", job, alias=alias)
    return job_json(job)


def wake_waiting() -> int:
    """Re-ask every waiting job now; returns how many."""
    store = get_store()
    with transaction.atomic(using=store.alias):
        count = store.wake_waiting(clock.now())
        if count:
            engines = set(
                Job.objects.using(store.alias)
                .filter(state=JobState.WAITING)
                .values_list("engine", flat=True)
                .distinct()
            )
            store.notify(engines)
    return count


def inspect_job(job_id: int) -> dict[str, Any]:
    try:
        job = Job.objects.using(jobs_settings.DATABASE).get(pk=job_id)
    except Job.DoesNotExist:
        raise JobNotFound(f"No job has id {job_id}.") from None
    return job_detail_json(job)


#: Children shown per job by ``children_tree`` (the rest are counted, not listed).
TREE_WIDTH = 50


def children_tree(job_id: int, *, width: int = TREE_WIDTH, depth: int = 10) -> list[dict[str, Any]]:
    """The job's children and theirs, down to ``depth`` levels: ``{id, kind, state,
    children, more}`` each, at most ``width`` per job in spawn order (``more``: how many
    were left out). One query per parent shown; each job appears once (no cycle loops)."""
    seen = {job_id}

    def level(parent_id: int, left: int) -> list[dict[str, Any]]:
        rows = list(
            Job.objects.using(jobs_settings.DATABASE)
            .filter(parent_id=parent_id)
            .order_by("id")
            .values("id", "kind", "state", "children_total")[: width + 1]
        )
        nodes = []
        for row in rows[:width]:
            if row["id"] in seen:
                continue
            seen.add(row["id"])
            below = level(row["id"], left - 1) if row["children_total"] and left > 1 else []
            nodes.append(
                {"id": row["id"], "kind": row["kind"], "state": row["state"], "children": below}
            )
        if len(rows) > width and nodes:
            total = Job.objects.using(jobs_settings.DATABASE).filter(parent_id=parent_id).count()
            nodes[-1]["more"] = total - width
        return nodes

    return level(job_id, depth)


def dead_letters(limit: int = 100) -> list[dict[str, Any]]:
    jobs = Job.objects.using(jobs_settings.DATABASE).filter(state=JobState.FAILED).order_by("-id")
    return [job_json(j) for j in jobs[:limit]]


def describe_kinds() -> list[dict[str, Any]]:
    return [h.describe() for h in all_handles()]


def inspect_queues() -> dict[str, Any]:
    return queue_stats()


def workers() -> list[dict[str, Any]]:
    """Every worker's row (running, stopping, stopped, or lost once its heartbeat is older
    than the lease) with the ids of the jobs it runs: ``jobs workers --json``, ``GET
    workers/``."""
    return fleet.worker_rows(using=jobs_settings.DATABASE)


def queues() -> list[dict[str, Any]]:
    """Every queue, per engine, with ``paused``, ``reason`` and its jobs' counts per state:
    ``jobs queues --json``, ``GET queues/``."""
    return fleet.queue_rows(using=jobs_settings.DATABASE)


#: The longest queue name (``Job.queue``).
QUEUE_NAME_MAX = 100
REASON_MAX = 2000


def _check_queue(name: Any, engine: Any) -> None:
    if not isinstance(name, str) or not name or len(name) > QUEUE_NAME_MAX:
        raise InvalidPayload(
            f"A queue name is a string of 1 to {QUEUE_NAME_MAX} characters, not {name!r}; "
            "`jobs queues` lists the queues."
        )
    check_label(name, what="queue name")
    if engine not in jobs_settings.engine_names():
        raise UnknownEngine(
            f"No engine is named {engine!r}; the engines are: "
            f"{', '.join(jobs_settings.engine_names())} (JOBS['ENGINES'])."
        )


def pause_queue(
    name: str, engine: str = "default", reason: str = "", *, paused_by: str = ""
) -> dict[str, Any]:
    """Pause the queue ``name`` of ``engine``: within a second no worker starts a job of it;
    running jobs finish, enqueueing is still accepted, and the pause outlives restarts (it is
    a row). Pausing a paused queue updates its reason. Returns the pause as JSON."""
    _check_queue(name, engine)
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise InvalidPayload(f"The reason is a string of at most {REASON_MAX} characters.")
    check_label(reason, what="reason")
    return fleet.pause(
        name, engine=engine, reason=reason, paused_by=paused_by, using=jobs_settings.DATABASE
    )


def resume_queue(name: str, engine: str = "default") -> dict[str, Any]:
    """Resume the queue ``name`` of ``engine``: workers start its jobs again (within a
    second). ``resumed`` is false when it was not paused."""
    _check_queue(name, engine)
    resumed = fleet.resume(name, engine=engine, using=jobs_settings.DATABASE)
    return {"queue": name, "engine": engine, "paused": False, "resumed": resumed}


def explain_claim(engine: str = "default", queue: str | None = None) -> dict[str, Any]:
    """The statement a worker of ``engine`` (on ``queue``, or all its queues) claims with now,
    its parameters, and the database's plan for it: to debug a stuck queue from the exact SQL.

    The statement comes from the store, as the worker builds it, for one batch of the engine's
    concurrency; it is planned (``EXPLAIN``; SQLite: ``EXPLAIN QUERY PLAN``), never run. Over
    a cap or a rate, or with tenants' round-robin, the worker adds exclusions to its WHERE;
    the queues paused (``paused``) are passed over as the workers pass over them.
    """
    if engine not in jobs_settings.engine_names():
        raise UnknownEngine(
            f"No engine is named {engine!r}; the engines are: "
            f"{', '.join(jobs_settings.engine_names())} (JOBS['ENGINES'])."
        )
    store = get_store()
    now = clock.now()
    queues = [queue] if queue else None
    paused = sorted(fleet.paused_queues(engine, using=jobs_settings.DATABASE))
    sql, params = store.claim_statement(
        Claim(
            engine=engine,
            worker_id="explain",
            limit=jobs_settings.engine_concurrency(engine),
            now=now,
            leased_until=now + jobs_settings.lease,
            queues=queues,
            skip=ClaimSkip(queues=paused) if paused else None,
        )
    )
    return {
        "database": store.vendor,
        "engine": engine,
        "queues": queues,
        "paused": paused,
        "due": store.count_due(engine=engine, now=now),
        "sql": sql,
        "params": [_param_json(p) for p in params],
        "plan": store.explain(sql, params),
        "at": now.isoformat(),
    }


def _param_json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_param_json(v) for v in value]
    return value
