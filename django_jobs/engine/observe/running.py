"""The job running in this context, for the few calls that behave differently inside one.

The executor sets ``CURRENT`` around a runner's call; admission reads it (one context-variable
read per enqueue) to refuse a job enqueueing itself by its own live key, and to hold the jobs
enqueued with ``after_current=True`` until the running job's success is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...models import Job


class Running:
    """One run of a job: the job, and what its success admits (``after_current=True``)."""

    #: The OpenTelemetry context of the run's ``process`` span while it runs (``tracing``).
    trace: Any = None

    def __init__(self, job: Job) -> None:
        self.job = job
        self.after: list[Callable[[], object]] | None = None  # made on first use: most runs none

    def add(self, admit: Callable[[], object]) -> None:
        if self.after is None:
            self.after = []
        self.after.append(admit)

    def on_success(self) -> Callable[[], None] | None:
        """What the transaction recording this run's success must do, or None."""
        if not self.after:
            return None
        admits = list(self.after)

        def admit_all() -> None:
            for admit in admits:
                admit()

        return admit_all


CURRENT: ContextVar[Running | None] = ContextVar("django_jobs_running", default=None)
