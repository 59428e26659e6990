"""``ctx``: what a runner sees of its job, and the buffer of its live progress and log."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from ... import clock
from ...conf import jobs_settings
from ...durations import Duration, format_duration, parse_duration
from ...exceptions import Cancelled, JobTimeout
from ...kinds.hooks import Hooks
from ...validation import storable_text
from ..durable.steps import Steps
from ..durable.workflows import read_previous
from ..observe.running import Running

if TYPE_CHECKING:
    from ...models import Job
    from ..durable.step_writer import StepWriter


_UNREAD = object()


@dataclass(frozen=True)
class Requeue:
    """Returned by ``ctx.requeue``: park the job in ``waiting`` and re-ask it later."""

    reason: str
    run_at: datetime


class LiveState(Running):
    """Progress and log lines of a running job, written to the row in coalesced batches; and,
    as ``Running``, the run that ``engine.running.CURRENT`` names while the runner is called."""

    #: The worker's step writer (``engine.step_writer``), set by the worker as the job starts;
    #: None: each step row is written by the thread that runs the step.
    step_writer: StepWriter | None = None

    def __init__(self, job: Job) -> None:
        self.job, self.after = job, None  # Running's, set here: one call less per job
        self.lock = threading.Lock()
        self.progress: dict[str, Any] | None = job.progress
        self.log: list[str] = list(job.log or [])
        self.dirty = False
        self.new_lines: list[str] = []
        self.progress_changed = False
        self.cancel_requested = bool(job.cancel_requested)
        #: The runner read ``ctx.cancelled`` as true because of a cancel request: if it then
        #: returns, it stopped because of it, and the job ends ``cancelled``.
        self.cancel_seen = False
        # What the outcome took (new log lines, progress changed) for the worker to publish.
        self.final: tuple[list[str], bool] = ([], False)
        self.deadline: datetime | None = None
        self.timeout: timedelta | None = None  # the kind's, that set ``deadline``
        #: ``ctx.check_cancelled()`` raised ``JobTimeout`` in the runner (or an ``async def``
        #: runner was cancelled by its timeout): if the runner then returns, it caught it and
        #: cleaned up, and the attempt succeeds with what it returned (Celery's soft limit).
        self.timeout_raised = False
        #: Under a supervisor: the parent was told this attempt started (``engine.child``),
        #: and the attempt was ended at its hard time limit (what its thread returns later is
        #: dropped).
        self.announced = False
        self.stopped = False
        # For the recorder: the kind's hooks (None: none to call) and the exception the run
        # failed with.
        self.hooks: Hooks | None = None
        self.exc: BaseException | None = None

    def add_line(self, line: str) -> None:
        line = storable_text(line)  # a log line never fails its job: bad characters are escaped
        tail = max(int(jobs_settings.LOG_TAIL), 0)
        with self.lock:
            self.log.append(line)
            if len(self.log) > tail:
                del self.log[: len(self.log) - tail]
            self.new_lines.append(line)
            self.dirty = True

    def set_progress(self, stage: str, percent: float | None, meta: Any = None) -> None:
        """``meta``: JSON kept beside them (a Celery task's ``update_state(meta=)``)."""
        stage = storable_text(stage)
        progress: dict[str, Any] = {"stage": stage, "percent": percent}
        if meta is not None:
            progress["meta"] = meta
        with self.lock:
            self.progress = progress
            self.progress_changed = True
            self.dirty = True

    def take(self) -> tuple[dict[str, Any] | None, list[str] | None, list[str], bool] | None:
        """Return (progress, log, new lines, progress changed) if anything changed, and reset."""
        with self.lock:
            if not self.dirty:
                return None
            taken = (self.progress, list(self.log), self.new_lines, self.progress_changed)
            self.dirty, self.new_lines, self.progress_changed = False, [], False
            return taken


class JobContext:
    """The ``ctx`` passed to a runner."""

    def __init__(self, job: Job, payload: Any, live: LiveState) -> None:
        self.job = job
        self.payload = payload
        self.live = live
        self._step: Steps | None = None
        self._previous: Any = _UNREAD

    @property
    def attempt(self) -> int:
        return self.job.attempts

    @property
    def tenant(self) -> str | None:
        return self.job.tenant

    @property
    def state(self) -> Any:
        return self.job.captured

    @property
    def owner(self) -> Any:
        return self.job.owner if self.job.owner_id is not None else None

    @property
    def is_last_attempt(self) -> bool:
        """True on the attempt after which a failure is final (``max_attempts`` reached)."""
        return self.job.attempts >= self.job.max_attempts

    @property
    def previous(self) -> Any:
        """The result of the step before this job in a ``chain`` (a list of results after a
        ``group``), handed over by the flow that spawned it; None for the first member, or a
        job outside a flow. Read once, on first use (``spawn(..., previous=)`` stores it)."""
        if self._previous is _UNREAD:
            self._previous = read_previous(self.job) if self.job.parent_id is not None else None
        return self._previous

    @property
    def step(self) -> Steps:
        if self._step is None:
            self._step = Steps(self)
        return self._step

    # -- live output --------------------------------------------------------------------------

    def log(self, message: str) -> None:
        """Append a line to the job's log (the last ``LOG_TAIL`` lines are kept)."""
        self.live.add_line(str(message))

    def progress(self, stage: str, percent: float | None = None) -> None:
        """Report progress; frequent calls are coalesced into one write."""
        if percent is not None:
            percent = max(0.0, min(100.0, float(percent)))
        self.live.set_progress(str(stage), percent)

    async def alog(self, message: str) -> None:
        self.log(message)

    async def aprogress(self, stage: str, percent: float | None = None) -> None:
        self.progress(stage, percent)

    # -- flow ---------------------------------------------------------------------------------

    def requeue(self, reason: str, after: Duration = "30s") -> Requeue:
        """``return ctx.requeue(...)``: wait, holding no slot or attempt; re-ask after ``after``."""
        return Requeue(str(reason), clock.now() + parse_duration(after, name="after"))

    @property
    def timed_out(self) -> bool:
        deadline = self.live.deadline
        return deadline is not None and clock.now() >= deadline

    @property
    def cancelled(self) -> bool:
        if self.live.cancel_requested:
            self.live.cancel_seen = True
            return True
        return self.timed_out

    def check_cancelled(self) -> None:
        """Raise ``Cancelled`` once a cancel was requested (``JobTimeout`` past the timeout)."""
        if self.live.cancel_requested:
            raise Cancelled(f"Job #{self.job.pk} was cancelled; stop and return.")
        if self.timed_out:
            self.live.timeout_raised = True
            limit = f" of {format_duration(self.live.timeout)}" if self.live.timeout else ""
            raise JobTimeout(
                f"Job #{self.job.pk} ran past its timeout{limit}; stop and return (a runner "
                "that catches this, cleans up and returns succeeds with what it returns)."
            )

    async def acheck_cancelled(self) -> None:
        await sync_to_async(self.check_cancelled)()
