"""``Task``: a Celery task's class, its calls and its requests, over a kind of the engine.

A task registered by ``shared_task`` is an instance of a ``Task`` subclass whose ``run`` is the
decorated function, as in Celery; its kind (``task.handle``) runs it in a worker. What Celery's
documentation says of each attribute and call holds here (docs/migrating-from-celery.md).
"""

from __future__ import annotations

import functools
import inspect
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from ..kinds.handle import JobHandle
from . import policy
from . import request as requests
from .codec import encode
from .exceptions import Ignore, MaxRetriesExceededError, Reject, Retry
from .hooks import ExceptionInfo
from .policy import attempts_for, backoff_interval
from .request import Request

if TYPE_CHECKING:
    from .result import AsyncResult


class Task:
    """A Celery task. Subclass it for ``base=`` (its ``on_success``, ``on_failure``,
    ``on_retry`` and ``after_return`` are called with Celery's arguments); ``shared_task``
    makes the instances."""

    name: ClassVar[str | None] = None
    max_retries: ClassVar[int | None] = 3
    default_retry_delay: ClassVar[float] = 3 * 60
    rate_limit: ClassVar[str | int | float | None] = None
    ignore_result: ClassVar[bool] = False
    soft_time_limit: ClassVar[float | None] = None
    time_limit: ClassVar[float | None] = None
    autoretry_for: ClassVar[tuple[type[BaseException], ...]] = ()
    dont_autoretry_for: ClassVar[tuple[type[BaseException], ...]] = ()
    retry_kwargs: ClassVar[dict[str, Any]] = {}
    retry_backoff: ClassVar[bool | int | float] = False
    retry_backoff_max: ClassVar[int] = 600
    retry_jitter: ClassVar[bool] = True
    queue: ClassVar[str | None] = None
    priority: ClassVar[int | None] = None
    expires: ClassVar[float | datetime | timedelta | None] = None
    throws: ClassVar[tuple[type[BaseException], ...]] = ()
    acks_late: ClassVar[bool | None] = None
    reject_on_worker_lost: ClassVar[bool | None] = None
    track_started: ClassVar[bool | None] = None
    typing: ClassVar[bool] = True
    serializer: ClassVar[str] = "json"
    MaxRetriesExceededError: ClassVar[type[MaxRetriesExceededError]] = MaxRetriesExceededError

    #: The kind that runs this task (``shared_task`` sets it).
    handle: JobHandle
    #: ``bind=True``: ``run`` takes the task as its first argument.
    bound: ClassVar[bool] = False

    # -- the body -------------------------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("A Task subclass defines run(), or shared_task wraps a function.")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body here and now, as Celery's ``task(...)``: no job, no worker;
        ``self.request.called_directly`` is True, and ``self.retry()`` raises the error.
        A base's own ``__call__`` that calls ``super().__call__`` in a worker runs the body in
        the worker's request (Celery's stack protection)."""
        stack = requests.stack()
        top = stack[-1] if stack else None
        if (
            top is not None
            and not top.called_directly
            and not top.protected
            and top.task == self.name
        ):
            top.protected = True
            return self.call_run(args, kwargs)
        stack.append(Request(args=list(args), kwargs=dict(kwargs), task=self.name))
        try:
            return self.call_run(args, kwargs)
        finally:
            stack.pop()

    def call_run(self, args: Any, kwargs: Any) -> Any:
        """``run`` with ``autoretry_for``: a listed exception becomes ``self.retry(exc=...)``,
        with ``retry_backoff``'s countdown when set (Celery's ``add_autoretry_behaviour``)."""
        try:
            return self.run(*args, **kwargs)
        except (Retry, Ignore, Reject):
            raise
        except BaseException as exc:
            if not self.autoretry_for or not isinstance(exc, self.autoretry_for):
                raise
            if self.dont_autoretry_for and isinstance(exc, self.dont_autoretry_for):
                raise
            options = dict(self.retry_kwargs)
            if self.retry_backoff:
                options["countdown"] = backoff_interval(
                    factor=int(max(1.0, float(self.retry_backoff))),
                    retries=self.request.retries,
                    maximum=int(self.retry_backoff_max),
                    full_jitter=bool(self.retry_jitter),
                )
            raise self.retry(exc=exc, **options) from None

    # -- the request ----------------------------------------------------------------------------

    @property
    def request(self) -> Request:
        return requests.current()

    @property
    def app(self) -> Any:
        from . import names

        return names.current_app

    # -- retry ----------------------------------------------------------------------------------

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Ask for this task to run again after ``countdown`` seconds (``default_retry_delay``
        when neither it nor ``eta`` is given). Past ``max_retries`` (the task's, or this call's)
        it raises ``exc`` if given, else ``MaxRetriesExceededError``. It raises ``Retry``
        itself, so ``raise self.retry(...)`` reads as in Celery."""
        if args is not None or kwargs is not None:
            raise NotImplementedError(
                "self.retry(args=, kwargs=) would run the task again with other arguments; "
                "a job keeps its payload. Enqueue the task anew with them "
                "(self.apply_async(args, kwargs, countdown=...)) and return, or keep what "
                "changes in a durable step (ctx.step.run) of a native @job."
            )
        if not throw:
            raise NotImplementedError(
                "self.retry(throw=False) lets the body go on after asking for a retry; here "
                "the retry is the attempt's outcome. Write raise self.retry(...) and return "
                "nothing after it."
            )
        if options:
            raise NotImplementedError(
                f"self.retry({', '.join(sorted(options))}=...): a retry keeps its job's queue, "
                "priority and limits. Set them on the task (@shared_task(queue=...)), or "
                "enqueue the task anew with apply_async(...) and return."
            )
        request = self.request
        retries = request.retries + 1
        limit = self.max_retries if max_retries is None else max_retries
        if request.called_directly:
            # Not run by a worker: the error itself, as Celery raises it there.
            if exc is not None:
                raise exc
            raise Retry("Task can be retried", None)
        if eta is None and countdown is None:
            countdown = self.default_retry_delay
        if limit is not None and retries > limit:
            if exc is not None:
                raise policy.mark_spent(exc)
            raise self.MaxRetriesExceededError(
                f"Can't retry {self.name}[{request.id}] args:{request.args} "
                f"kwargs:{request.kwargs}",
                task_args=request.args,
                task_kwargs=request.kwargs,
            )
        if max_retries is not None and request.job is not None:
            _allow_attempts(request, attempts_for(max_retries))
        raise Retry(exc=exc, when=eta if eta is not None else countdown)

    # -- calls ----------------------------------------------------------------------------------

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        """``apply_async(args, kwargs)``: enqueue one run with these arguments."""
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        *,
        countdown: float | None = None,
        eta: datetime | None = None,
        expires: float | timedelta | datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
        task_id: str | None = None,
        link: Any = None,
        link_error: Any = None,
        **options: Any,
    ) -> AsyncResult:
        """Enqueue one run: a job of this task's kind, in the caller's transaction."""
        from .calls import enqueue

        return enqueue(
            self,
            args,
            kwargs,
            countdown=countdown,
            eta=eta,
            expires=expires,
            queue=queue,
            priority=priority,
            task_id=task_id,
            link=link,
            link_error=link_error,
            options=options,
        )

    def AsyncResult(self, task_id: str, **kwargs: Any) -> AsyncResult:  # noqa: N802 - Celery's
        from .result import AsyncResult

        return AsyncResult(task_id, task_name=self.name)

    def update_state(
        self, task_id: str | None = None, state: str | None = None, meta: Any = None, **kw: Any
    ) -> None:
        """Report progress: ``AsyncResult.state`` reads ``state`` and ``.info`` reads ``meta``
        while the job runs (stored as the job's live progress)."""
        request = self.request
        if request.ctx is None or (task_id is not None and task_id != request.id):
            raise NotImplementedError(
                "update_state() reports the progress of the task running here; another task's "
                "state is its own job's. Call it from inside the running task, without task_id."
            )
        request.ctx.live.set_progress(str(state or "PROGRESS"), _percent(meta), encode(meta))

    # -- canvas ---------------------------------------------------------------------------------

    def s(self, *args: Any, **kwargs: Any) -> Any:
        from .canvas import Signature

        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Any:
        from .canvas import Signature

        return Signature(self, args, kwargs, immutable=True)

    def signature(
        self, args: Any = None, kwargs: Any = None, *, immutable: bool = False, **options: Any
    ) -> Any:
        from .canvas import Signature

        return Signature(self, tuple(args or ()), dict(kwargs or {}), immutable, options)

    # -- handlers: Celery's, called by the worker once the outcome is recorded ------------------

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        """Called just before the body runs (in the worker)."""

    def on_success(self, retval: Any, task_id: str, args: Any, kwargs: Any) -> None:
        """Called after a success is recorded."""

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: ExceptionInfo
    ) -> None:
        """Called after a failure is recorded (final: no retry follows)."""

    def on_retry(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: ExceptionInfo
    ) -> None:
        """Called after a retry is recorded (``exc``: what the retry was asked for)."""

    def after_return(
        self,
        status: str,
        retval: Any,
        task_id: str,
        args: Any,
        kwargs: Any,
        einfo: ExceptionInfo | None,
    ) -> None:
        """Called after ``on_success``, ``on_failure`` or ``on_retry``."""

    # -- introspection --------------------------------------------------------------------------

    def check_arguments(self, args: Any, kwargs: Any) -> None:
        """Celery's ``typing``: arguments that the body could not take fail at the call."""
        if not self.typing:
            return
        signature = self._signature
        if signature is None:
            return
        try:
            if self.bound and getattr(type(self), "__wrapped__", None) is not None:
                signature.bind(self, *args, **kwargs)
            else:
                signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None

    @functools.cached_property
    def _signature(self) -> inspect.Signature | None:
        """The body's signature, read once (each call is checked against it: reading it
        again costs a call as much as the rest of ``delay``'s own work)."""
        function = getattr(type(self), "__wrapped__", None) or self.run
        try:
            return inspect.signature(function)
        except (TypeError, ValueError):
            return None

    def __repr__(self) -> str:
        return f"<@task: {self.name}>"


def _allow_attempts(request: Request, attempts: int) -> None:
    """``self.retry(max_retries=N)`` above the task's own: the job may take that many attempts
    (the engine's ceiling, raised for this job, as Celery's override counts for this call)."""
    job = request.job
    if attempts > job.max_attempts:
        from ..store import get_store

        get_store().raise_attempt_limit(job.pk, attempts)
        job.max_attempts = attempts


def _percent(meta: Any) -> float | None:
    """The percent a Celery progress ``meta`` of ``{"current": i, "total": n}`` says."""
    if not isinstance(meta, dict):
        return None
    current, total = meta.get("current"), meta.get("total")
    numbers = (int, float)
    if isinstance(current, numbers) and isinstance(total, numbers) and total > 0:
        return max(0.0, min(100.0, 100.0 * float(current) / float(total)))
    return None
