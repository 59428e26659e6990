"""Bare psycopg loops on django_jobs' own job table: what the machine allows at the moment.

``python bare.py FIGURE --url URL [--jobs N] [--batch B]``, FIGURE one of:

- ``insert``: one ``INSERT`` per transaction (autocommit), a job row written by hand;
- ``insert-notify``: the same as one statement that also NOTIFYs, ``ON CONFLICT DO NOTHING
  RETURNING id`` on the live-key index: the least an enqueue that wakes workers can send;
- ``insert-notify-tx``: that statement alone in an explicit transaction (``BEGIN``, the
  statement, ``COMMIT``: three round trips): the least an enqueue inside the caller's
  ``transaction.atomic()`` can cost, and so, beside ``insert-notify``, the ratio the machine
  allows that figure;
- ``insert-100``: 100 single-row ``INSERT`` statements per transaction;
- ``multirow``: one multi-row ``INSERT ... VALUES`` of ``--batch`` rows per statement;
- ``copy``: ``COPY ... FROM STDIN`` of ``--batch`` rows per statement;
- ``drain``: rows loaded by COPY, then one thread claims 64 with ``FOR UPDATE SKIP LOCKED``
  on the claim index, marks them succeeded, repeats;
- ``pickup``: a consumer process LISTENs, claims on each NOTIFY and stamps ``started_at``
  with its clock reading as the claim returns; this process inserts ``--pickup-jobs`` rows
  ``--pickup-gap`` ms apart, each with its own ``run_at`` clock reading, taken just before
  the insert. Latency = ``started_at - run_at``: the span django_jobs' and Procrastinate's
  pickups are timed on (the enqueue call to the job in the consumer's hands).

Every row is a complete ``bench.noop`` job with a unique idempotency key.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime

from common import JOB_TABLE, connect, emit, parser, percentile, rate, reset_job_table, wait_for

COLUMNS = (
    "kind, queue, engine, state, payload, priority, attempts, max_attempts, log, "
    "idempotency_key, version, cancel_requested, wake_requested, run_at, created_at, "
    "timestamps_derived"
)
ROW = (
    "'bench.noop', 'default', 'default', 'queued', %s::jsonb, 0, 0, 1, '[]', %s, '', "
    "false, false, %s, %s, false"
)
INSERT = f"INSERT INTO {JOB_TABLE} ({COLUMNS}) VALUES ({ROW})"
INSERT_NOTIFY = (
    f"WITH ins AS ({INSERT} ON CONFLICT DO NOTHING RETURNING id) "
    "SELECT ins.id, pg_notify(%s, 'default') FROM ins"
)
CHANNEL = "django_jobs_bare"
CLAIM = (
    f"WITH picked AS (SELECT id FROM {JOB_TABLE} WHERE state IN ('queued', 'waiting') "
    "AND run_at <= now() AND engine = 'default' ORDER BY priority, run_at, id "
    "LIMIT %s FOR UPDATE SKIP LOCKED) "
    f"UPDATE {JOB_TABLE} AS j SET state = 'running', attempts = j.attempts + 1, "
    "worker_id = 'bare', leased_until = now() + interval '30 seconds', started_at = now() "
    "FROM picked WHERE j.id = picked.id RETURNING j.id, j.payload"
)
SUCCEED = (
    f"UPDATE {JOB_TABLE} SET state = 'succeeded', started_at = %s, ended_at = now(), "
    "worker_id = NULL, leased_until = NULL WHERE id = ANY(%s) AND worker_id = 'bare'"
)


def values(i: int, tag: str) -> tuple[str, str, datetime, datetime]:
    now = datetime.now(UTC)
    return (f'{{"n":{i}}}', f"bare:{tag}:{i}", now, now)


def insert(url: str, n: int, *, notify: bool = False, transaction: bool = False) -> float:
    with connect(url) as conn:
        if transaction:

            def run() -> None:
                for i in range(n):
                    with conn.transaction():
                        conn.execute(INSERT_NOTIFY, [*values(i, "t"), CHANNEL]).fetchone()
        elif notify:

            def run() -> None:
                for i in range(n):
                    conn.execute(INSERT_NOTIFY, [*values(i, "n"), CHANNEL]).fetchone()
        else:

            def run() -> None:
                for i in range(n):
                    conn.execute(INSERT, values(i, "1"))

        return rate(n, run)


def insert_per_transaction(url: str, n: int, per: int) -> float:
    with connect(url) as conn:

        def run() -> None:
            for start in range(0, n, per):
                with conn.transaction():
                    for i in range(start, min(start + per, n)):
                        conn.execute(INSERT, values(i, "100"))

        return rate(n, run)


def multirow(url: str, n: int, batch: int) -> float:
    with connect(url) as conn:

        def run() -> None:
            for start in range(0, n, batch):
                rows = [values(i, "m") for i in range(start, min(start + batch, n))]
                sql = f"INSERT INTO {JOB_TABLE} ({COLUMNS}) VALUES " + ", ".join(
                    [f"({ROW})"] * len(rows)
                )
                conn.execute(sql, [value for row in rows for value in row])

        return rate(n, run)


def copy(url: str, n: int, batch: int) -> float:
    columns = (
        "kind, queue, engine, state, payload, priority, attempts, max_attempts, log, "
        "idempotency_key, version, cancel_requested, wake_requested, run_at, created_at, "
        "timestamps_derived"
    )
    with connect(url) as conn:

        def run() -> None:
            for start in range(0, n, batch):
                with conn.cursor().copy(f"COPY {JOB_TABLE} ({columns}) FROM STDIN") as copier:
                    for i in range(start, min(start + batch, n)):
                        payload, key, run_at, created_at = values(i, "c")
                        copier.write_row(
                            (
                                "bench.noop",
                                "default",
                                "default",
                                "queued",
                                payload,
                                0,
                                0,
                                1,
                                "[]",
                                key,
                                "",
                                False,
                                False,
                                run_at,
                                created_at,
                                False,
                            )
                        )

        return rate(n, run)


def drain(url: str, n: int, batch: int) -> float:
    copy(url, n, batch)
    with connect(url) as conn:
        conn.execute(f"ANALYZE {JOB_TABLE}")
        done = 0

        def run() -> None:
            nonlocal done
            while True:
                ids = [row[0] for row in conn.execute(CLAIM, [64])]
                if not ids:
                    return
                conn.execute(SUCCEED, [datetime.now(UTC), ids])
                done += len(ids)

        result = rate(n, run)
    if done != n:
        raise SystemExit(f"The bare drain ran {done} jobs of {n}.")
    return result


def consume(url: str) -> None:
    """The pickup consumer: claim on every NOTIFY, stamp started_at when the claim returns."""
    with connect(url) as listener, connect(url) as conn:
        listener.execute(f"LISTEN {CHANNEL}")
        print("listening", flush=True)
        for _ in listener.notifies():
            while True:
                ids = [row[0] for row in conn.execute(CLAIM, [64])]
                if not ids:
                    break
                conn.execute(SUCCEED, [datetime.now(UTC), ids])


def pickup(url: str, n: int, gap: float) -> dict[str, float]:
    consumer = subprocess.Popen(
        [sys.executable, __file__, "consume", "--url", url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != "listening":
            raise SystemExit("The bare pickup consumer did not start.")
        with connect(url) as conn:

            def succeeded() -> int:
                return conn.execute(
                    f"SELECT COUNT(*) FROM {JOB_TABLE} WHERE state = 'succeeded'"
                ).fetchone()[0]

            for i in range(20):  # warm-up, as for django_jobs
                conn.execute(INSERT_NOTIFY, [*values(i, "warm"), CHANNEL]).fetchone()
                time.sleep(gap)
            wait_for(lambda: succeeded() >= 20, 30, "the warm-up rows")
            first_id = conn.execute(f"SELECT MAX(id) FROM {JOB_TABLE}").fetchone()[0]
            began = time.perf_counter()
            for i in range(n):
                pause = began + i * gap - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                conn.execute(INSERT_NOTIFY, [*values(i, "p"), CHANNEL]).fetchone()
            wait_for(lambda: succeeded() >= n + 20, 60, "the paced rows")
            latencies = [
                (started - due).total_seconds() * 1000
                for started, due in conn.execute(
                    f"SELECT started_at, run_at FROM {JOB_TABLE} WHERE id > %s", [first_id]
                )
            ]
    finally:
        consumer.terminate()
        consumer.wait(10)
    return {
        "bare: pickup p50": percentile(latencies, 50),
        "bare: pickup p95": percentile(latencies, 95),
        "bare: pickup p99": percentile(latencies, 99),
    }


def main() -> None:
    args = parser(__doc__.split("\n")[0]).parse_args()
    if args.figure == "consume":
        consume(args.url)
        return
    reset_job_table(args.url)
    n, batch = args.jobs, args.batch
    if args.figure == "insert":
        emit({"bare: insert 1/tx": insert(args.url, n)})
    elif args.figure == "insert-notify":
        emit({"bare: insert+notify 1/tx": insert(args.url, n, notify=True)})
    elif args.figure == "insert-notify-tx":
        emit({"bare: insert+notify in tx": insert(args.url, n, transaction=True)})
    elif args.figure == "insert-100":
        emit({"bare: insert 100/tx": insert_per_transaction(args.url, n, 100)})
    elif args.figure == "multirow":
        emit({"bare: multi-row insert": multirow(args.url, n, batch)})
    elif args.figure == "copy":
        emit({"bare: copy": copy(args.url, n, batch)})
    elif args.figure == "drain":
        emit({"bare: drain": drain(args.url, n, batch)})
    elif args.figure == "pickup":
        emit(pickup(args.url, args.pickup_jobs, args.pickup_gap / 1000))
    else:
        raise SystemExit(f"Unknown figure {args.figure!r}.")
    reset_job_table(args.url)


if __name__ == "__main__":
    main()
