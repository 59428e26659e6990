"""Event rows on PostgreSQL: a batch in one statement (``unnest``), with the write lock and the
NOTIFY, so that in autocommit it is one round trip."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..base.events import EventRowsMixin
from ..event_rows import COLUMNS, NOTIFY_CHANNEL, TABLE, WRITE_LOCK, NewEvent


def _postgresql_sql(ordered: bool) -> str:
    # The lock is taken before the first id is drawn: the INSERT reads the "locked" row
    # before it emits any row. The rows go in in the order sent (ORDER BY the ordinal), so
    # their ids follow it. The NOTIFY is delivered on commit, and sent only if a row was
    # inserted. Parameters: the lock key (ordered), the arrays, the channel.
    lock = "locked AS (SELECT pg_advisory_xact_lock(%s)), " if ordered else ""
    after_lock = ", (SELECT COUNT(*) FROM locked) AS l" if ordered else ""
    # Binary arrays (%b): the client does not quote every value of the batch.
    return (
        f"WITH {lock}ins AS (INSERT INTO {TABLE} ({COLUMNS}) "
        "SELECT u.type, u.job_id, u.owner, u.data, u.created_at FROM unnest("
        "%b::varchar[], %b::bigint[], %b::varchar[], %b::text[], %b::timestamptz[]) "
        f"WITH ORDINALITY AS u(type, job_id, owner, data, created_at, n){after_lock} "
        "ORDER BY u.n RETURNING id), "
        "told AS (SELECT pg_notify(%s, '') FROM (SELECT 1 FROM ins LIMIT 1) AS one) "
        "SELECT ins.id FROM ins, (SELECT COUNT(*) AS n FROM told) AS w"
    )


_POSTGRESQL_SQL = {ordered: _postgresql_sql(ordered) for ordered in (False, True)}


class PostgresEventRows(EventRowsMixin):
    """Event rows in one statement, the write lock taken first when ``ordered``."""

    def _insert_event_rows(self, events: Sequence[NewEvent], ordered: bool) -> list[int]:
        params: list[Any] = [WRITE_LOCK] if ordered else []
        params += [
            [e.type for e in events],
            [e.job_id for e in events],
            [e.owner for e in events],
            [e.data for e in events],
            [e.created_at for e in events],
            NOTIFY_CHANNEL,
        ]
        # Server-side binding: the statement gets prepared (see PostgresStore.prepared_cursor).
        with self.prepared_cursor() as cursor:
            cursor.execute(_POSTGRESQL_SQL[ordered], params)
            return [row[0] for row in cursor.fetchall()]
