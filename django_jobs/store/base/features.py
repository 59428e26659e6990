"""What differs between databases: capability flags, declared here with what each promises and
set by each store class (as Django's ``connection.features``). Callers ask the flag, never the
vendor."""

from __future__ import annotations

from typing import Any, ClassVar


class StoreFeatures:
    """The capability flags every store has; a store class sets those its database has."""

    #: The database's name, for people (an ``explain``'s output); no caller branches on it.
    vendor = ""

    #: ``listen_for_jobs`` and ``listen_for_events`` can wake a waiter when rows commit
    #: (LISTEN/NOTIFY). Without it, workers and relays poll.
    supports_listen = False
    #: ``lock_jobs`` passes over rows another transaction holds (``SKIP LOCKED``) instead of
    #: waiting for them. Without it the database has one writer, and nothing to pass over.
    supports_skip_locked = False
    #: ``estimated_rows`` gives the planner's row estimate of a table, far cheaper than a
    #: ``COUNT(*)`` of a big one. Without it, it gives None and callers count.
    estimates_row_counts = False
    #: Seconds an idle worker waits between claims unless ``JOBS["POLL_INTERVAL"]`` says:
    #: short when polling is all there is, long when a notification wakes the worker first.
    poll_interval_default = 0.25
    #: ``store.events.insert`` writes a batch of event rows, its ordering lock and its
    #: notification in one statement, so in autocommit it needs no transaction of its own.
    inserts_events_in_one_statement = False
    #: Connection options (``OPTIONS`` of the alias, the project's own taking precedence) a
    #: long-running worker sets so that a silent network fails its statements in bounded time.
    worker_connection_options: ClassVar[dict[str, Any]] = {}
