"""The keeper's cadence: ``Duty``, a chore run every so often on a worker's keeper thread.

The keeper runs its duties in turn after each batch of outcomes, those that are due, with one
reading of the clock for the round. A duty has no thread and no connection of its own: it
shares the keeper's. A duty's store calls go through the worker's retry (``Retry``), so a
database away for a while holds the duty up rather than ending it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Retry(Protocol):
    """A worker's store call, tried again while the database is away; None once the worker
    stops (unless ``forever``)."""

    def __call__(self, fn: Callable[[], T], *, forever: bool = False) -> T | None: ...


class Duty:
    """One chore of the keeper: run every ``every`` seconds, the first time ``first`` seconds
    after the keeper starts."""

    def __init__(self, *, every: float, first: float = 0.0) -> None:
        self.every = every
        self.first = first
        self.next_at = 0.0  # monotonic; set by ``start``

    def start(self, now: float) -> None:
        self.next_at = now + self.first

    def run(self, now: float) -> None:
        """Run it (it is due) and set when it is due next."""
        wait = self.run_once()
        self.next_at = now + (self.every if wait is None else wait)

    def run_once(self) -> float | None:
        """Do the chore once; the seconds until the next time, or None for ``every``."""
        raise NotImplementedError


class Every(Duty):
    """A plain function as a duty: the keeper's own chores (flushes, heartbeats, reads)."""

    def __init__(self, chore: Callable[[], object], *, every: float, first: float = 0.0) -> None:
        super().__init__(every=every, first=first)
        self.chore = chore

    def run_once(self) -> None:
        self.chore()
