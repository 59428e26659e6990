"""``AsyncResult``: a task's run as its job row says it, in Celery's words.

``AsyncResult(id)`` rebuilds one from the id ``delay()`` returned (the job's id, or the
``task_id=`` the call gave). Every read asks the database again, as Celery asks its result
backend: ``state``, ``result``/``info``, ``ready()``, ``get(timeout=)``.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from ..conf import jobs_settings
from ..states import JobState
from . import exceptions as celery_exceptions
from . import request as requests
from . import states
from .codec import arguments, decode
from .names import registered, task_names

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
    if state == states.RETRY:
        return retry_reason(job.error or "", job.kind)
    if state == states.FAILURE:
        return exception_of(job.error or "", job.kind)
    if isinstance(job.progress, dict) and "meta" in job.progress:
        return decode(job.progress["meta"])
    return None


#: ``Retry``'s words when it carries the error that asked for it: ``Retry in 5s: KeyError('x')``.
RETRY_WORDS = re.compile(r"^(?:\w+: )?Retry (?:in \S+|at .+?): (\w+)\((.*)\)$")


def retry_reason(error: str, kind: str | None = None) -> BaseException | None:
    """A retrying task's result, as Celery's: the error given to ``self.retry(exc=...)`` (the
    one ``autoretry_for`` caught), rebuilt; None for a retry that gave none."""
    lines = error.splitlines()
    found = RETRY_WORDS.match(lines[0]) if lines else None
    if found is None:
        return None
    name, arguments = found.groups()
    values: tuple[Any, ...]
    try:
        values = tuple(ast.literal_eval(f"({arguments},)")) if arguments else ()
    except (ValueError, SyntaxError):
        values = (arguments,)
    message = str(values[0]) if len(values) == 1 else ", ".join(map(str, values))
    return rebuilt(name, message, kind)


def exception_class(name: str, kind: str | None) -> type[BaseException] | None:
    """The exception class a task's error names: Celery's, a builtin, or one the task's own
    module defines or imports (Celery rebuilds it from its module; the type's name and the
    task's module stand in for that here)."""
    candidates: list[Any] = [celery_exceptions, builtins]
    task = registered(kind) if kind else None
    if task is not None:
        module = sys.modules.get(getattr(type(task), "__module__", "") or "")
        candidates.insert(0, module)
    for place in candidates:
        found = getattr(place, name, None) if place is not None else None
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
    return None


def rebuilt(name: str, message: str, kind: str | None) -> BaseException:
    found = exception_class(name, kind)
    if found is not None:
        try:
            return found(message) if message else found()
        except Exception:
            pass
    return celery_exceptions.TaskError(name, message)


def exception_of(error: str, kind: str | None = None) -> BaseException:
    """The exception a job's error text names: a Celery exception, a builtin or one of the
    task's module rebuilt with its message, else ``TaskError(type name, message)``."""
    lines = error.splitlines()
    head = next((line for line in lines if line.startswith("Last error: ")), None)
    line = head[len("Last error: ") :] if head else (lines[0] if lines else "")
    name, _, message = line.partition(": ")
    if name == "JOB_TIMEOUT":
        # The hard limit's words; any other JOB_TIMEOUT is the soft limit, left uncaught.
        hard = message.startswith("stopped at its time limit")
        limit = (
            celery_exceptions.TimeLimitExceeded if hard else celery_exceptions.SoftTimeLimitExceeded
        )
        return limit(message)
    if name == "CHILD_FAILED":
        return celery_exceptions.ChordError(message)
    if name == "WORKER_LOST":
        return celery_exceptions.WorkerLostError(message)
    return rebuilt(name, message, kind)
