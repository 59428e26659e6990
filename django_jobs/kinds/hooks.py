"""``@job(on_success=, on_failure=, on_retry=)``: called in the worker once an outcome is recorded.

A hook gets ``(job, exc)``: the job as recorded, and the exception object itself for a failure
or a retry (None for a success). A hook runs after the outcome is committed, so it cannot
change it; one that raises is logged and changes nothing. A kind without hooks costs nothing:
the executor hands the kind's ``Hooks`` (None) to the recorder on the run's ``LiveState``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..printable import printable
from ..states import JobState

if TYPE_CHECKING:
    from ..models import Job
    from ..store import Outcome

logger = logging.getLogger("django_jobs.hooks")

Hook = Callable[["Job", BaseException | None], Any]


@dataclass(frozen=True)
class Hooks:
    on_success: Hook | None = None
    on_failure: Hook | None = None
    on_retry: Hook | None = None

    @classmethod
    def of(cls, kind: str, **hooks: Hook | None) -> Hooks | None:
        """The kind's hooks, or None when it has none (then nothing is called, or checked)."""
        for name, hook in hooks.items():
            if hook is not None and not callable(hook):
                raise TypeError(
                    f"@job({kind!r}, {name}={hook!r}): pass a function taking (job, exc)."
                )
        if all(hook is None for hook in hooks.values()):
            return None
        return cls(**hooks)

    def pick(self, state: str, exc: BaseException | None) -> tuple[Hook | None, str]:
        """The hook for a recorded outcome in ``state`` (and its name): a success, a failure
        made final, or a failed attempt that will be retried (``queued`` after an exception)."""
        if state == JobState.SUCCEEDED:
            return self.on_success, "on_success"
        if state == JobState.FAILED:
            return self.on_failure, "on_failure"
        if state == JobState.QUEUED and exc is not None:
            return self.on_retry, "on_retry"
        return None, ""


def call_hooks(hooks: Hooks, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
    """Call the hook that fits the recorded ``outcome``; log what one raises."""
    hook, name = hooks.pick(outcome.state, exc)
    if hook is None:
        return
    try:
        hook(job, None if outcome.state == JobState.SUCCEEDED else exc)
    except Exception:
        logger.exception(
            "The %s hook of job %s (%s) raised; the job's outcome stands.",
            name,
            job.pk,
            printable(job.kind),
        )
