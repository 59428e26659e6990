"""The journal of a run's steps: the ``JobStep`` rows one run reads, inserts and ends.

``Steps`` (``ctx.step``) and the workflows' ``spawn``/``gather`` keep their rows through it: a
step is entered once per run (``enter``), begun (``begin``: inserted, or counted again), and
ended (``finish``/``fail``). Every write is fenced by the run's hold on its job (``held``): a
run whose lease ran out gets ``LeaseLost`` instead of writing over the run that took over.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django.db import connections

from ... import clock
from ...conf import jobs_settings
from ...exceptions import StepDuplicate, StepNested
from ...models import Job, JobStep
from ...states import StepState
from ...store import get_store
from ...store.base import StepRow
from ...validation import storable_text

if TYPE_CHECKING:
    from .step_writer import StepWriter


class Live(Protocol):
    """What the journal needs of the run's live state: its step writer, if the run has one."""

    @property
    def step_writer(self) -> StepWriter | None: ...


class StepHost(Protocol):
    """What the journal and ``Steps`` need of the job's context (``engine.run.context``,
    which sits above this package and fulfils it)."""

    @property
    def job(self) -> Job: ...

    @property
    def live(self) -> Live: ...


class LeaseLost(Exception):
    """This run no longer holds its job: its lease ran out and the job was re-asked.

    A worker cut off from the database (or stalled) past its lease comes back to a job that
    another worker has taken over; its step writes are refused, so that they cannot land over
    what the new run stored, and its run ends (its outcome is fenced out the same way).
    """


class Journal:
    """The step rows of one run of one job."""

    def __init__(self, ctx: StepHost) -> None:
        self.ctx = ctx
        self.alias = jobs_settings.DATABASE
        self._seen: set[str] = set()
        #: The step running now (a step never runs inside another).
        self.active: str | None = None
        #: The job's stored steps by name; None: read them again when next needed.
        self.rows: dict[str, JobStep] | None = None

    def stored(self) -> dict[str, JobStep]:
        if self.rows is None and self._first_run():
            self.rows = {}
        if self.rows is None:
            rows = JobStep.objects.using(self.alias).filter(job_id=self.ctx.job.pk)
            self.rows = {row.name: row for row in rows}
        return self.rows

    def enter(self, name: str) -> JobStep | None:
        if self.active is not None:
            raise StepNested(
                f"Step {name!r} was called inside step {self.active!r}. Steps run one at a "
                "time: call it after the outer step returns."
            )
        if name in self._seen:
            raise StepDuplicate(
                f"Step name {name!r} is used twice in one run of job #{self.ctx.job.pk}. Step "
                "names are the replay key: give each step its own name."
            )
        self._seen.add(name)
        return self.stored().get(name)

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

    def held(self) -> tuple[str, int] | None:
        """This run's hold on its job: (worker id, attempt); None when no worker runs it."""
        job = self.ctx.job
        if job.worker_id is None:
            return None
        return (job.worker_id, job.attempts)

    def check_held(self) -> None:
        held = self.held()
        if held is not None and not get_store(self.alias).job_held(self.ctx.job.pk, held):
            raise self.lease_lost()

    def lease_lost(self) -> LeaseLost:
        return LeaseLost(
            f"Job #{self.ctx.job.pk} is no longer held by this run (worker "
            f"{self.ctx.job.worker_id}, attempt {self.ctx.job.attempts}): its lease ran out and "
            "it was re-asked. This run's step writes are refused."
        )

    def save(self, row: JobStep, fields: list[str]) -> None:
        """Write ``fields`` of ``row``, in one statement, only while this run holds its job."""
        held = self.held()
        written = get_store(self.alias).update_step(
            row.pk, {field: getattr(row, field) for field in fields}, job_id=row.job_id, held=held
        )
        if not written and held is not None:
            raise self.lease_lost()

    def key(self, name: str) -> str:
        return f"{self.ctx.job.kind}:{self.ctx.job.pk}:{name}"

    def insert(
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
            seq=len(self.stored()),
            key=self.key(name),
            started_at=started_at,
            held=self.held(),
            state=state,
            value=value,
            error=error,
            ended_at=ended_at,
        )
        step_id = self._write_new(new)
        if step_id is None:
            raise self.lease_lost()
        row = JobStep.stored(self.alias, step_id, new)
        self.stored()[name] = row
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

    def begin(self, name: str, row: JobStep | None) -> JobStep:
        now = clock.now()
        if row is None:
            row = self.insert(name, now)
        else:
            row.state, row.attempts, row.started_at, row.error = (
                StepState.RUNNING,
                row.attempts + 1,
                now,
                None,
            )
            self.save(row, ["state", "attempts", "started_at", "error"])
        return row

    def finish(self, row: JobStep, value: Any) -> None:
        row.state, row.value, row.ended_at = StepState.COMPLETED, value, clock.now()
        self.save(row, ["state", "value", "ended_at"])

    @staticmethod
    def error(exc: BaseException) -> str:
        return storable_text(f"{type(exc).__name__}: {exc}")[:2000]

    def fail(self, row: JobStep, exc: BaseException) -> None:
        row.state, row.error, row.ended_at = StepState.FAILED, self.error(exc), clock.now()
        self.save(row, ["state", "error", "ended_at"])
