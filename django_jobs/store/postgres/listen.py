"""LISTEN/NOTIFY: the channels, the wake-ups a store sends in the caller's transaction, and
the listening connection a worker or a relay waits on."""

from __future__ import annotations

import hashlib
from typing import Any

from ..base.notifications import NotificationsMixin
from ..event_rows import NOTIFY_CHANNEL as EVENTS_CHANNEL

CHANNEL = "django_jobs"
#: A worker's own channel for its jobs' cancels: this prefix and a digest of its worker id
#: (a channel name is an identifier of at most 63 bytes; a worker id may be longer).
CANCEL_CHANNEL_PREFIX = "django_jobs_cancel_"
#: Workers hear on it that a queue of an engine (the payload) was paused or resumed.
PAUSED_CHANNEL = "django_jobs_paused"


class _Listener:
    """A LISTENing autocommit connection of its own (see ``base.Listener``)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def wait(self, timeout: float) -> list[str]:
        return [payload for _, payload in self.wait_notifications(timeout)]

    def wait_notifications(self, timeout: float) -> list[tuple[str, str]]:
        # stop_after=1: back as soon as one arrives; the others wait for the next call.
        return [
            (n.channel, n.payload) for n in self._connection.notifies(timeout=timeout, stop_after=1)
        ]

    def close(self) -> None:
        self._connection.close()


class PostgresNotifications(NotificationsMixin):
    """NOTIFY inside the caller's transaction (delivered on commit), LISTEN on a connection
    of its own."""

    def notify_cancel(self, cancels: list[tuple[str, int]]) -> None:
        # In the cancel's transaction: delivered on commit, to the worker holding the job.
        with self.connection.cursor() as cursor:
            for worker_id, job_id in cancels:
                cursor.execute(
                    "SELECT pg_notify(%s, %s)", [self.cancel_channel(worker_id), str(job_id)]
                )

    def notify_paused(self, engines: set[str]) -> None:
        # In the pause's transaction: the workers read their paused set again on commit.
        with self.connection.cursor() as cursor:
            for engine in sorted(engines):
                cursor.execute("SELECT pg_notify(%s, %s)", [PAUSED_CHANNEL, engine])

    def notify(self, engines: set[str]) -> None:
        # Sent inside the enqueuing transaction: PostgreSQL delivers it only on commit, so a
        # rolled-back enqueue wakes nobody.
        with self.connection.cursor() as cursor:
            for engine in sorted(engines):
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, engine])

    def _listen(self, *channels: str) -> _Listener:
        db = self.connection
        # A connection of its own, with the alias's settings: a LISTEN must outlive the
        # transactions of the thread that waits on it.
        connection = db.get_new_connection(db.get_connection_params())
        try:
            connection.autocommit = True
            for channel in channels:
                connection.execute(f"LISTEN {channel}")
        except BaseException:
            connection.close()
            raise
        return _Listener(connection)

    paused_channel = PAUSED_CHANNEL

    def cancel_channel(self, worker_id: str) -> str:
        return CANCEL_CHANNEL_PREFIX + hashlib.sha256(worker_id.encode()).hexdigest()[:24]

    def listen_for_jobs(self, worker_id: str | None = None) -> _Listener:
        if worker_id is None:
            return self._listen(CHANNEL)
        return self._listen(CHANNEL, self.cancel_channel(worker_id), PAUSED_CHANNEL)

    def listen_for_events(self) -> _Listener:
        return self._listen(EVENTS_CHANNEL)
