"""The Celery tasks by name, a run's task id, and what the calls need of a task.

Below everything else of the layer that reads them: ``registration`` fills the table,
``result`` and ``canvas`` look up in it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..kinds.handle import JobHandle
    from ..models import Job

_tasks: dict[str, Any] = {}


class TaskLike(Protocol):
    """What ``calls`` and ``canvas`` use of a ``Task`` (which imports them)."""

    @property
    def name(self) -> str | None: ...

    @property
    def priority(self) -> int | None: ...

    @property
    def expires(self) -> float | datetime | timedelta | None: ...

    @property
    def handle(self) -> JobHandle: ...

    def check_arguments(self, args: Any, kwargs: Any) -> None: ...

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any: ...


def register(name: str, task: Any) -> None:
    _tasks[name] = task


def registered(name: str) -> Any | None:
    return _tasks.get(name)


def task_names() -> list[str]:
    """The kinds that are Celery tasks (``AsyncResult`` looks only among them)."""
    return list(_tasks)


def task(name: str) -> Any:
    """The task registered as ``name``; ``NotRegistered`` as Celery raises it."""
    from .exceptions import NotRegistered

    try:
        return _tasks[name]
    except KeyError:
        raise NotRegistered(name) from None


def task_id_of(job: Job) -> str:
    """The Celery id of ``job``: the ``task_id=`` its call gave (its key), else its job id."""
    key = job.idempotency_key
    if key and not key.startswith(("call:", "payload:")):
        return key
    return str(job.pk)


#: The app ``Task.app`` answers with: ``django_jobs.celery.app`` sets it (it imports this).
current_app: Any = None


#: The apps a project made (``Celery(...)``; ``django_jobs.celery.app`` adds each): their
#: ``conf`` holds the broker the project named.
apps: list[Any] = []


def higher_runs_first() -> bool:
    """Does a higher Celery priority run first in this project? On RabbitMQ (an ``amqp://``
    broker) it does; on Redis, as here, a lower number runs first."""
    from django.conf import settings

    urls = [getattr(settings, "CELERY_BROKER_URL", None)]
    urls += [app.conf.get("broker_url") for app in apps]
    return any(str(url).startswith(("amqp", "pyamqp")) for url in urls if url)


def job_priority(priority: int | None) -> int | None:
    """A Celery priority as the job's (lower runs first): negated where a higher one ran
    first (RabbitMQ), so the order the project had is kept."""
    if priority is None:
        return None
    return -int(priority) if higher_runs_first() else int(priority)


class CurrentTask:
    """``celery.current_task``: the task running in this thread, as a proxy; false outside one
    (Celery's proxy is then None)."""

    def _task(self) -> Any | None:
        from .request import current

        name = current().task
        return _tasks.get(name) if name else None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        task = self._task()
        if task is None:
            raise RuntimeError(
                f"current_task.{name}: no task runs in this thread (current_task is the task "
                "whose body is running; test it with `if current_task:`)."
            )
        return getattr(task, name)

    def __bool__(self) -> bool:
        return self._task() is not None

    def __repr__(self) -> str:
        return repr(self._task())


current_task = CurrentTask()
