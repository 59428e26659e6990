"""Wake-ups: what a store sends inside the caller's transaction so that waiters hear of rows
once they commit, and the listeners that hear them (``supports_listen``; without it, workers
and relays poll)."""

from __future__ import annotations

from typing import Protocol

from .core import StoreCore


class Listener(Protocol):
    """A connection of its own that hears the store's notifications (``supports_listen``).

    A notification is a hint that rows committed, never the rows themselves: the caller reads
    the table after each wake-up, and after a timeout anyway.
    """

    def wait(self, timeout: float) -> list[str]:
        """The payloads that arrived, as soon as one does; empty after ``timeout`` seconds."""
        ...

    def wait_notifications(self, timeout: float) -> list[tuple[str, str]]:
        """As ``wait``, each payload with the channel it came on: ``(channel, payload)``."""
        ...

    def close(self) -> None: ...


class NotificationsMixin(StoreCore):
    """Notifications sent in the caller's transaction (delivered on commit), and listeners."""

    def notify(self, engines: set[str]) -> None:
        """Wake idle workers of ``engines`` once the current transaction commits."""

    #: The channel ``listen_for_jobs(worker_id)`` also hears ``notify_paused`` on (its payload
    #: the engine); empty where the store does not ``supports_listen``.
    paused_channel = ""

    def notify_paused(self, engines: set[str]) -> None:
        """Tell the workers of ``engines`` that a queue was paused or resumed, once the current
        transaction commits. Only where ``supports_listen``: elsewhere workers read the paused
        queues every half second."""

    def notify_cancel(self, cancels: list[tuple[str, int]]) -> None:
        """Tell the workers holding these running jobs (worker id, job id) that their cancel
        was requested, once the caller's transaction commits. Only where ``supports_listen``:
        elsewhere the workers read ``cancels_requested`` at their poll interval."""

    def listen_for_jobs(self, worker_id: str | None = None) -> Listener:
        """A ``Listener`` that hears which engines have new due jobs (payload: the engine
        name), once their transaction commits; with ``worker_id``, also the cancels of that
        worker's running jobs (``notify_cancel``; channel: ``cancel_channel(worker_id)``,
        payload: the job id) and the pauses of queues (``notify_paused``; channel:
        ``paused_channel``, payload: the engine). Only where ``supports_listen``."""
        raise NotImplementedError(f"{type(self).__name__} cannot listen (supports_listen).")

    def listen_for_events(self) -> Listener:
        """A ``Listener`` woken when event rows commit. Only where ``supports_listen``."""
        raise NotImplementedError(f"{type(self).__name__} cannot listen (supports_listen).")

    def cancel_channel(self, worker_id: str) -> str:
        """The channel a worker hears its jobs' cancels on. Only where ``supports_listen``."""
        raise NotImplementedError(f"{type(self).__name__} cannot listen (supports_listen).")
