"""``AsyncResult``: a task's run as its job row says it, in Celery's words.

``AsyncResult(id)`` rebuilds one from the id ``delay()`` returned (the job's id, or the
``task_id=`` the call gave). Every read asks the database again, as Celery asks its result
backend: ``state``, ``result``/``info``, ``ready()``, ``get(timeout=)``.
"""

from __future__ import annotations

import builtins
import time
from typing import TYPE_CHECKING, Any

from ..conf import jobs_settings
from ..states import JobState
from . import exceptions as celery_exceptions
from . import request as requests
from . import states
from .codec import arguments, decode
from .names import task_names

if TYPE_CHECKING:
    from ..models import Job


def find(task_id: str, task_name: str | None = None) -> Job | None:
    """The job of ``task_id``: the latest one keyed by it, else the job of that id."""
    from ..models import Job

    rows = Job.objects.using(jobs_settings.DATABASE)
    if task_id.isdigit():
        found = rows.filter(pk=int(task_id)).first()
        if found is not None:
            return found
    kinds = [task_name] if task_name else task_names()
    return rows.filter(kind__in=kinds, idempotency_key=task_id).order_by("-id").first()


class AsyncResult:
    """A task's run: its ``state``, its ``result``, and ``get()`` to wait for it."""

    def __init__(
        self,
        id: str,  # noqa: A002 - Celery's name
        backend: Any = None,
        task_name: str | None = None,
        app: Any = None,
    ) -> None:
        if not isinstance(id, str) or not id:
            raise TypeError(f"AsyncResult(id): pass the id delay() returned, not {id!r}")
        self.id = id
        self.task_name = task_name

    @classmethod
    def of(cls, job: Job, task_id: str | None = None) -> AsyncResult:
        result = cls(task_id or str(job.pk), task_name=job.kind)
        return result

    # -- the row --------------------------------------------------------------------------------

    def _job(self) -> Job | None:
        return find(self.id, self.task_name)

    @property
    def job(self) -> Job | None:
        """The job row (None: no such task, which Celery reports as PENDING)."""
        return self._job()

    @property
    def state(self) -> str:
        job = self._job()
        return _state(job)

    status = state

    @property
    def result(self) -> Any:
        """The return value after SUCCESS; the exception after FAILURE or REVOKED; the meta of
        ``update_state`` while it runs; else None."""
        return _result(self._job())

    info = result

    @property
    def traceback(self) -> str | None:
        job = self._job()
        return job.error if job is not None and job.state == JobState.FAILED else None

    @property
    def date_done(self) -> Any:
        job = self._job()
        return job.ended_at if job is not None else None

    @property
    def name(self) -> str | None:
        job = self._job()
        return job.kind if job is not None else self.task_name

    @property
    def args(self) -> list[Any] | None:
        job = self._job()
        return arguments(job.payload)[0] if job is not None else None

    @property
    def kwargs(self) -> dict[str, Any] | None:
        job = self._job()
        return arguments(job.payload)[1] if job is not None else None

    @property
    def retries(self) -> int:
        job = self._job()
        return max(job.attempts - 1, 0) if job is not None else 0

    @property
    def queue(self) -> str | None:
        job = self._job()
        return job.queue if job is not None else None

    def ready(self) -> bool:
        return self.state in states.READY_STATES

    def successful(self) -> bool:
        return self.state == states.SUCCESS

    def failed(self) -> bool:
        return self.state == states.FAILURE

    # -- waiting --------------------------------------------------------------------------------

    def get(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        disable_sync_subtasks: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Wait until the task is ready and return its value; raise its error when it failed
        (``propagate``), ``celery.exceptions.TimeoutError`` past ``timeout`` seconds."""
        if disable_sync_subtasks and not requests.current().called_directly:
            raise RuntimeError(
                "Never call result.get() within a task! A task that waits for another holds "
                "its worker slot: chain them (chain(a.s(), b.s())), or wait in a durable step "
                "of a native @job (ctx.step.gather), which gives the slot back while it waits."
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self._job()
            state = _state(job)
            if state in states.READY_STATES:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise celery_exceptions.TimeoutError("The operation timed out.")
            time.sleep(
                interval
                if deadline is None
                else max(0.0, min(interval, deadline - time.monotonic()))
            )
        value = _result(job)
        if propagate and state in states.PROPAGATE_STATES:
            raise value
        return value

    wait = get

    # -- control --------------------------------------------------------------------------------

    def revoke(
        self,
        connection: Any = None,
        terminate: bool = False,
        signal: Any = None,
        wait: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Cancel the task: a queued run never starts; a running one is asked to stop (its
        body sees it at ``ctx.check_cancelled()``)."""
        if terminate:
            raise NotImplementedError(
                "revoke(terminate=True) kills the process running the task, and every task "
                "beside it in that process. Call revoke() to cancel: a running task is asked "
                "to stop and ends cancelled at its next check (docs/migrating-from-celery.md, "
                "revoke(terminate=True)); its time_limit ends one that never checks."
            )
        from ..operations import cancel

        job = self._job()
        if job is not None and job.state not in (
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
        ):
            cancel(job.pk)

    def forget(self) -> None:
        raise NotImplementedError(
            "forget() drops a result from Celery's backend; here the result is the job's row, "
            "kept until retention prunes it (JOBS['RETENTION'], manage.py jobs prune)."
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return other.id == self.id
        if isinstance(other, str):
            return other == self.id
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.id)

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"


def _state(job: Job | None) -> str:
    if job is None:
        return states.PENDING  # Celery's answer for an id it has never seen
    if job.state in (JobState.RUNNING, JobState.WAITING) and isinstance(job.progress, dict):
        if "meta" in job.progress:
            return str(job.progress.get("stage") or states.STARTED)
    return states.of_job(job.state, job.attempts)


def _result(job: Job | None) -> Any:
    if job is None:
        return None
    state = _state(job)
    if state == states.SUCCESS:
        return decode(job.result)
    if state == states.REVOKED:
        return celery_exceptions.TaskRevokedError(job.error or "revoked")
    if state in (states.FAILURE, states.RETRY):
        return exception_of(job.error or "")
    if isinstance(job.progress, dict) and "meta" in job.progress:
        return decode(job.progress["meta"])
    return None


def exception_of(error: str) -> BaseException:
    """The exception a job's error text names: a builtin or a Celery exception rebuilt with
    its message, else ``TaskError(type name, message)``."""
    lines = error.splitlines()
    head = next((line for line in lines if line.startswith("Last error: ")), None)
    line = head[len("Last error: ") :] if head else (lines[0] if lines else "")
    name, _, message = line.partition(": ")
    if name == "JOB_TIMEOUT":
        # The hard limit's words; any other JOB_TIMEOUT is the soft limit, left uncaught.
        hard = message.startswith("stopped at its time limit")
        kind = (
            celery_exceptions.TimeLimitExceeded if hard else celery_exceptions.SoftTimeLimitExceeded
        )
        return kind(message)
    if name == "CHILD_FAILED":
        return celery_exceptions.ChordError(message)
    if name == "WORKER_LOST":
        return celery_exceptions.WorkerLostError(message)
    found = getattr(celery_exceptions, name, None) or getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        try:
            return found(message)
        except Exception:
            pass
    return celery_exceptions.TaskError(name, message)
