"""Retry policy: a small pure object that turns (attempt, now) into a decision."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..durations import Duration, parse_duration
from ..exceptions import RetryLater

BACKOFFS = ("exponential", "linear", "fixed")


@dataclass(frozen=True, kw_only=True)
class RetryDecision:
    """What to do after a failed attempt."""

    retry: bool
    """True: run again at ``run_at``; False: the retries are spent."""
    run_at: datetime | None = None


@dataclass(frozen=True, init=False)
class Retry:
    """How often and how soon a failed job runs again.

    ``attempts`` counts every attempt, the first included. Delays grow ``exponential``-ly
    (delay * 2**n), ``linear``-ly (delay * (n+1)) or stay ``fixed``, capped at ``max_delay``.
    With ``jitter`` the delay is "equal jitter": half fixed, half random, so failing jobs do
    not retry in lockstep.

    ``on``: the exception types that retry (and their subclasses), as Celery's
    ``autoretry_for``; any other exception fails the job at once, its error saying it was not
    retried and why. The default, ``(Exception,)``, retries every failure. ``RetryLater``
    retries whatever ``on`` lists, so ``on=RetryLater`` is Celery's ``self.retry()`` alone:
    only the runner's own request retries.
    """

    attempts: int
    backoff: str
    delay: timedelta
    max_delay: timedelta
    jitter: bool
    on: tuple[type[BaseException], ...]
    _rng: random.Random = field(compare=False, repr=False)

    def __init__(
        self,
        attempts: int = 3,
        backoff: str = "exponential",
        delay: Duration = "1s",
        max_delay: Duration = "1h",
        jitter: bool = True,
        on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"Retry(attempts={attempts!r}): attempts must be an integer >= 1.")
        if backoff not in BACKOFFS:
            raise ValueError(
                f"Retry(backoff={backoff!r}): use one of {', '.join(repr(b) for b in BACKOFFS)}."
            )
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "backoff", backoff)
        object.__setattr__(self, "delay", parse_duration(delay, name="Retry delay"))
        object.__setattr__(self, "max_delay", parse_duration(max_delay, name="Retry max_delay"))
        object.__setattr__(self, "jitter", bool(jitter))
        object.__setattr__(self, "on", _exception_types(on))
        object.__setattr__(self, "_rng", random.Random())

    def base_delay_ms(self, failed_attempt: int) -> int:
        """The delay after attempt number ``failed_attempt`` (1-based), without jitter."""
        base = self.delay.total_seconds() * 1000
        n = failed_attempt - 1
        if self.backoff == "exponential":
            value = base * (2 ** min(n, 62))
        elif self.backoff == "linear":
            value = base * (n + 1)
        else:
            value = base
        return int(min(value, self.max_delay.total_seconds() * 1000))

    def schedule(self) -> list[int]:
        """The delays between attempts in milliseconds, without jitter."""
        return [self.base_delay_ms(n) for n in range(1, self.attempts)]

    def delay_ms(self, failed_attempt: int) -> int:
        """The delay to use after ``failed_attempt``, with equal jitter when enabled."""
        base = self.base_delay_ms(failed_attempt)
        if not self.jitter or base <= 1:
            return base
        half = base / 2
        return int(half + self._rng.uniform(0, half))

    def retries(self, exc: BaseException) -> bool:
        """Whether a failure raising ``exc`` may be retried at all (``on``). ``on`` chooses
        among exceptions; what is not one (``SystemExit`` from a runner that called exit(), a
        crash of its thread) is an attempt lost, retried within ``attempts`` whatever ``on``
        says, as it always was."""
        return not isinstance(exc, Exception) or isinstance(exc, self.on)

    def not_retried(self, kind: str, attempt: int, exc: BaseException | None = None) -> str:
        """Why a failure (``exc``) of a type ``on`` does not list was final on attempt
        ``attempt`` of a job of ``kind``, and what to do: a ``NOT_RETRIED`` error's words after
        "is not retried: "."""
        if self.on == (RetryLater,):
            return (
                f"Retry(on=RetryLater) of {kind!r} retries only when its runner raises "
                f"RetryLater, as Celery's self.retry() does, so attempt {attempt} failed the job "
                "at once. Fix the cause, then retry it (`manage.py jobs retry ID`), or raise "
                "RetryLater where a retry is meant."
            )
        listed = ", ".join(t.__name__ for t in self.on)
        return (
            f"Retry(on=({listed})) of {kind!r} retries only those types, so attempt {attempt} "
            "failed the job at once. Fix the cause, then retry it (`manage.py jobs retry ID`), "
            "or add the type to on=."
        )

    def decide(self, attempt: int, now: datetime, *, limit: int | None = None) -> RetryDecision:
        """After attempt number ``attempt`` failed at ``now``: retry, or give up.

        ``limit`` is the job's own attempt limit (``Job.max_attempts``) when it is not
        ``attempts``: an operator's retry grants a fresh set of attempts on top of those used,
        and a job admitted under an older policy keeps its limit. The delay then grows within
        the last set: the first failure of a fresh set waits the first delay again.
        """
        limit = self.attempts if limit is None else limit
        if attempt >= limit:
            return RetryDecision(retry=False)
        nth = max(1, attempt - (limit - self.attempts))
        return RetryDecision(retry=True, run_at=now + timedelta(milliseconds=self.delay_ms(nth)))

    def as_json(self) -> dict[str, object]:
        return {
            "attempts": self.attempts,
            "backoff": self.backoff,
            "delay_ms": int(self.delay.total_seconds() * 1000),
            "max_delay_ms": int(self.max_delay.total_seconds() * 1000),
            "jitter": self.jitter,
            "schedule_ms": self.schedule(),
            "on": [_qualified_name(kind) for kind in self.on],
        }


def _exception_types(
    on: type[BaseException] | tuple[type[BaseException], ...],
) -> tuple[type[BaseException], ...]:
    types = on if isinstance(on, tuple) else (on,)
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise ValueError(
            f"Retry(on={on!r}): pass an exception class or a tuple of them, as Celery's "
            "autoretry_for, e.g. on=(ConnectionError, smtplib.SMTPException)."
        )
    return types


def _qualified_name(kind: type[BaseException]) -> str:
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
