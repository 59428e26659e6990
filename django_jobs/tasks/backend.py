"""``JobsBackend``: a backend for Django's Tasks framework that runs each task as a job.

Every backend alias registers one job kind (``django.tasks`` for the ``default`` alias,
``django.tasks:<alias>`` for others) whose runner imports the task by its module path and calls
it. Enqueue is the engine's enqueue, so it joins the caller's transaction.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils.module_loading import import_string

from ..conf import jobs_settings
from ..exceptions import JobsError
from ..kinds.handle import JobHandle
from ..kinds.registry import get, register, unregister
from ..kinds.retry import Retry
from ..models import Job
from .compat import (
    DEFAULT_TASK_BACKEND_ALIAS,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from .results import History, build_result, rebuild_task, task_payload
from .runner import run_task

KIND = "django.tasks"
OPTIONS = ("engine", "retry")


def kind_for(alias: str) -> str:
    """The job kind of a TASKS alias: ``django.tasks``, or ``django.tasks:<alias>``."""
    return KIND if alias == DEFAULT_TASK_BACKEND_ALIAS else f"{KIND}:{alias}"


def fresh_key(payload: Any) -> str:
    """Every enqueue of a Django task is a new job: a fresh idempotency key each time."""
    return f"task:{uuid.uuid4().hex}"


@dataclass(frozen=True)
class BackendConfig:
    """The validated ``OPTIONS`` of one TASKS alias."""

    alias: str
    kind: str
    engine: str
    retry: Retry

    @classmethod
    def parse(cls, alias: str, options: Any) -> BackendConfig:
        where = f"TASKS[{alias!r}]['OPTIONS']"
        if not isinstance(options, dict):
            raise ImproperlyConfigured(f"{where} must be a dict; got {options!r}.")
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ImproperlyConfigured(
                f"{where} has unknown keys {unknown}; JobsBackend understands "
                f"{', '.join(repr(o) for o in OPTIONS)}."
            )
        engine = options.get("engine", "default")
        if not isinstance(engine, str) or not engine:
            raise ImproperlyConfigured(f"{where}['engine'] must be the name of a JOBS engine.")
        retry = options.get("retry", {})
        if not isinstance(retry, Retry):
            if not isinstance(retry, dict):
                raise ImproperlyConfigured(
                    f"{where}['retry'] must be a dict of Retry arguments, e.g. "
                    '{"attempts": 3, "backoff": "exponential", "delay": "1s"}, or a Retry.'
                )
            try:
                retry = Retry(**{"attempts": 1, **retry})
            except (TypeError, ValueError, JobsError) as exc:
                raise ImproperlyConfigured(f"{where}['retry'] is invalid: {exc}") from exc
        return cls(alias=alias, kind=kind_for(alias), engine=engine, retry=retry)


def register_kind(config: BackendConfig) -> JobHandle:
    """Register (or reuse) the job kind that runs this alias's tasks."""
    existing = get(config.kind)
    if existing is not None and existing.func is run_task:
        if existing.engine == config.engine and existing.retry == config.retry:
            return existing
        if existing.engine != config.engine:
            unregister(config.kind)  # TASKS changed (tests): the new engine wins
    handle = JobHandle(
        kind=config.kind,
        func=run_task,
        idempotency_key=fresh_key,
        label=f"Django tasks ({config.alias})",
        group="Django tasks",
        engine=config.engine,
        own_retry=config.retry,
    )
    register(handle)
    return handle


class JobsBackend(BaseTaskBackend):
    """Runs Django tasks on django_jobs workers (``manage.py runjobs``)."""

    #: What ``runner.run_task`` checks: this backend's tasks run as django_jobs jobs.
    runs_tasks_as_jobs = True
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.kind = kind_for(alias)
        self.config: BackendConfig | None = None
        self.config_error: ImproperlyConfigured | None = None
        self._handle: JobHandle | None = None
        try:
            self.config = BackendConfig.parse(alias, self.options)
        except ImproperlyConfigured as exc:
            self.config_error = exc  # reported by check(), raised by enqueue()
        else:
            self._handle = register_kind(self.config)

    @property
    def handle(self) -> JobHandle:
        if self._handle is None:
            raise self.config_error or ImproperlyConfigured(
                f"TASKS[{self.alias!r}] is not usable; run `manage.py check`."
            )
        return self._handle

    # -- enqueue ------------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Insert the task's job in the caller's transaction; return its READY result."""
        self.validate_task(task)
        handle = self.handle
        self._check_importable(task)
        json.dumps([args, kwargs])  # a TypeError here names the value that is not JSON
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        job = handle.enqueue(
            task_payload(task, args, kwargs),
            queue=task.queue_name,
            priority=-task.priority,  # Django: higher runs sooner; jobs: lower runs first
            run_at=task.run_after,
        )
        result = build_result(task, job, History())
        # "Sent once a Task has been enqueued": with the caller's commit, never on a rollback.
        transaction.on_commit(
            partial(task_enqueued.send, type(self), task_result=result),
            using=jobs_settings.DATABASE,
        )
        return result

    @staticmethod
    def _check_importable(task: Task) -> None:
        path = task.module_path
        found = None
        if task.func.__module__ != "__main__":
            try:
                found = import_string(path)
            except ImportError:
                found = None
        if getattr(found, "func", None) is not task.func:
            raise InvalidTask(
                f"Task {path!r} cannot be imported by that path, so a worker could not run it. "
                "Define it at module level of an importable module (not __main__) and do not "
                "rebind its name."
            )

    # -- results ------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result from its job row; ``TaskResultDoesNotExist`` if there is none."""
        try:
            pk = int(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        if not 0 < pk < 2**63:
            raise TaskResultDoesNotExist(result_id)
        alias = jobs_settings.DATABASE
        try:
            job = Job.objects.using(alias).get(pk=pk, kind=self.kind)
        except Job.DoesNotExist:
            raise TaskResultDoesNotExist(result_id) from None
        task = rebuild_task(job.payload or {})
        return build_result(task, job, History.load(job.pk, alias))

    # -- configuration ------------------------------------------------------------------------

    # Django runs any iterable of messages; the stubs ask for a list.
    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:  # type: ignore[override]
        yield from super().check(**kwargs)
        if self.config_error is not None:
            yield checks.Error(
                str(self.config_error),
                hint="Fix the OPTIONS of this TASKS backend (see the django_jobs Tasks docs).",
                id="django_jobs.E101",
            )
        elif self.config is not None and self.config.engine not in jobs_settings.engine_names():
            yield checks.Error(
                f"TASKS[{self.alias!r}] runs on engine {self.config.engine!r}, which "
                f"JOBS['ENGINES'] does not define ({', '.join(jobs_settings.engine_names())}).",
                hint="Add the engine to JOBS['ENGINES'] or set OPTIONS['engine'] to one of them.",
                id="django_jobs.E102",
            )
