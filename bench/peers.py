"""Bare psycopg loops on the same table: the floor this machine sets at the moment of the run.

They share nothing with django_jobs but the schema, so the ratio of a figure to its floor tells
how much of the time the engine itself costs, whatever the disk's flush time and the load of
the moment (both vary tenfold on a shared two-core machine).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import unquote, urlparse

TABLE = "django_jobs_job"


def connect(url: str) -> Any:
    import psycopg

    parsed = urlparse(url)
    return psycopg.connect(
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 5432,
        user=unquote(parsed.username or "postgres"),
        password=unquote(parsed.password or "") or None,
        dbname=unquote(parsed.path.lstrip("/")),
        autocommit=True,
        prepare_threshold=5,
    )


def insert_one_per_transaction(url: str, template_id: int, n: int, tag: str) -> float:
    """Copy the template row ``n`` times, one INSERT per transaction (the commit floor)."""
    with connect(url) as conn:
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND column_name NOT IN ('id', 'idempotency_key') ORDER BY ordinal_position",
                [TABLE],
            )
        ]
        names = ", ".join(columns)
        statement = (
            f"INSERT INTO {TABLE} ({names}, idempotency_key) "
            f"SELECT {names}, %s FROM {TABLE} WHERE id = %s RETURNING id"
        )
        started = time.perf_counter()
        for i in range(n):
            conn.execute(statement, [f"peer:{tag}:{i}", template_id]).fetchone()
        return n / (time.perf_counter() - started)


def drain(url: str, batch: int = 64) -> tuple[int, float]:
    """Claim ``batch`` due rows, mark them succeeded, repeat: one thread, no job code."""
    claim = (
        f"WITH picked AS (SELECT id FROM {TABLE} WHERE state IN ('queued', 'waiting') "
        "AND run_at <= now() AND engine = 'default' ORDER BY priority, run_at, id "
        "LIMIT %s FOR UPDATE SKIP LOCKED) "
        f"UPDATE {TABLE} AS j SET state = 'running', attempts = j.attempts + 1, "
        "worker_id = 'peer', leased_until = now() + interval '30 seconds', started_at = now() "
        "FROM picked WHERE j.id = picked.id RETURNING j.id, j.payload"
    )
    complete = (
        f"UPDATE {TABLE} SET state = 'succeeded', ended_at = now(), worker_id = NULL, "
        "leased_until = NULL WHERE id = ANY(%s) AND worker_id = 'peer'"
    )
    done = 0
    with connect(url) as conn:
        started = time.perf_counter()
        while True:
            ids = [row[0] for row in conn.execute(claim, [batch])]
            if not ids:
                break
            conn.execute(complete, [ids])
            done += len(ids)
        return done, done / (time.perf_counter() - started)
