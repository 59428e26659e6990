"""How a Celery task runs again: only when it asks (``self.retry``, ``autoretry_for``), as
Celery's do, within ``max_retries`` counted by the task itself.

The engine's side is a ``Retry`` that retries the ``Retry`` exception alone (any other exception
fails the job at once, as a Celery task without ``autoretry_for`` fails), whatever its attempt:
``Task.retry`` decides when the retries are spent, with Celery's own rule, so a call's
``self.retry(max_retries=N)`` counts as in Celery. The engine's attempt limit is only a ceiling
above that, for an attempt lost with its worker process, which runs again (never lost:
Celery's ``acks_late=True`` with ``reject_on_worker_lost=True``; docs/migrating-from-celery.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from ..kinds.retry import Retry
from .exceptions import Retry as RetryRequest

#: The engine's attempt limit of a task whose ``max_retries`` is None (Celery: for ever).
UNLIMITED_ATTEMPTS = 1_000_000

#: Set on an error ``self.retry(exc=...)`` raised because the retries were spent (Celery
#: raises ``exc`` then): the failure's words say so rather than that the type is not retried.
SPENT = "_django_jobs_retries_spent"


def mark_spent(exc: BaseException) -> BaseException:
    try:
        setattr(exc, SPENT, True)
    except (AttributeError, TypeError):
        pass  # an exception type without attributes: the general words stand
    return exc


def attempts_for(max_retries: int | None) -> int:
    """The engine's attempt limit for ``max_retries``: the first run, then the retries."""
    if max_retries is None:
        return UNLIMITED_ATTEMPTS
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(
            f"max_retries={max_retries!r}: pass a count of retries after the first run "
            "(0 for none), or None to retry for ever, as Celery's max_retries."
        )
    return max_retries + 1


@dataclass(frozen=True, init=False)
class TaskRetry(Retry):
    """The engine's policy of a Celery task: ``Retry(on=celery.exceptions.Retry)``, whose
    delay is the task's own (``countdown``/``eta``) and whose words speak of ``self.retry``."""

    def __init__(self, *, max_retries: int | None, default_retry_delay: float) -> None:
        delay = max(float(default_retry_delay), 0.0)
        super().__init__(
            attempts=attempts_for(max_retries),
            backoff="fixed",
            delay=timedelta(seconds=delay),
            max_delay=timedelta(seconds=max(delay, 1.0)),
            jitter=False,
            on=RetryRequest,
        )

    def schedule(self) -> list[int]:
        # The delays are the task's own, asked for at each retry: none to list ahead.
        return []

    def not_retried(self, kind: str, attempt: int, exc: BaseException | None = None) -> str:
        if exc is not None and getattr(exc, SPENT, False):
            return (
                f"the retries of {kind!r} are spent (max_retries): self.retry(exc=...) raises "
                f"exc then, as in Celery, so attempt {attempt} failed the job. Fix the cause, "
                "then retry it (`manage.py jobs retry ID`), or raise max_retries."
            )
        return (
            f"{kind!r} is a Celery task: it runs again only when it asks (self.retry(), "
            f"autoretry_for), as in Celery, so attempt {attempt} failed the job. Fix the "
            "cause, then retry it (`manage.py jobs retry ID`), or add the type to "
            "autoretry_for."
        )


def backoff_interval(factor: int, retries: int, maximum: int, full_jitter: bool) -> int:
    """Celery's exponential backoff in seconds: ``factor * 2**retries`` capped at ``maximum``;
    with ``full_jitter``, a whole number drawn evenly from 0 to that (AWS's "full jitter")."""
    countdown = int(min(maximum, factor * (1 << retries)))
    if full_jitter:
        countdown = random.randint(0, max(countdown, 0))
    return max(0, countdown)
