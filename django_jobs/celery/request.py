"""``self.request``: what a Celery task knows of the call it runs in.

One stack per thread (a task called inside another task, directly, pushes and pops its own),
as Celery's ``Task.request_stack``. Outside any run the request says ``called_directly``: the
task's function was called as a plain function.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Request:
    """Celery's ``Context``, the names a task reads: ``id``, ``retries``, ``args``,
    ``kwargs``, ``eta``, ``expires``, ``hostname``, ``delivery_info``, ``is_eager``,
    ``called_directly``."""

    id: str | None = None
    retries: int = 0
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    eta: datetime | None = None
    expires: datetime | None = None
    hostname: str | None = None
    delivery_info: dict[str, Any] = field(default_factory=dict)
    is_eager: bool = False
    called_directly: bool = True
    #: The task's name, as Celery's ``request.task``.
    task: str | None = None
    root_id: str | None = None
    parent_id: str | None = None
    group: str | None = None
    timelimit: tuple[float | None, float | None] = (None, None)
    #: The job that runs this attempt (None when called directly): what ``update_state`` and
    #: the hooks reach.
    job: Any = None
    ctx: Any = None
    #: A base's own ``__call__`` reached ``Task.__call__`` in this request once already.
    protected: bool = False

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


_local = threading.local()


def stack() -> list[Request]:
    try:
        return _local.stack  # type: ignore[no-any-return]
    except AttributeError:
        _local.stack = []
        return _local.stack  # type: ignore[no-any-return]


def current() -> Request:
    """The request of the task running in this thread; a direct call's when none runs."""
    requests = stack()
    return requests[-1] if requests else Request()
