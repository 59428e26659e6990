"""Ended jobs partitioned by day beside one plain table: claim cost, ending a job, expiry.

Usage, from the repository root, with a local PostgreSQL::

    python -m bench.partitions                       # 0 and 1,000,000 ended rows (~2-4 min)
    python -m bench.partitions --ended 0,1000000,10000000 --days 30

Everything happens in a scratch schema, ``bench_partitions``, of the benchmark's database
(dropped at the start and at the end); the engine's own ``django_jobs_job`` is only read, for
its columns and indexes. Two tables get them:

- ``plain``: ``CREATE TABLE ... (LIKE django_jobs_job INCLUDING ALL)``: the same columns,
  defaults, primary key and indexes, partial ones included, as the engine's table today. It is
  pruned as ``engine/maintenance/duties.py`` prunes: in transactions of 2,000 rows, each one locking
  the oldest expired ended rows (``FOR UPDATE SKIP LOCKED``), deleting their steps (a scratch
  copy of ``django_jobs_jobstep``, empty here, so its cost is one index probe per batch), then
  the rows.
- ``parted``: the same columns, ``PARTITION BY RANGE (ended_at)``: one partition per day of
  ``ended_at`` (made ``--days`` back and one day ahead), and the DEFAULT partition, ``live``,
  for the rows whose ``ended_at`` is NULL, the jobs that have not ended, with
  ``CHECK (ended_at IS NULL)``: so a new day's partition is attached without scanning the live
  rows, and a row ending on a day that has no partition yet fails rather than landing in the
  live one. The same indexes are made on the parent (so on every partition), except the two
  unique ones, which cannot be global without the partition key in them: ``id`` gets a plain
  index, and the live-key unique index is made on ``live`` alone (where a key must be unique).
  Expiry drops whole day partitions.

Why RANGE on ``ended_at`` with a DEFAULT partition rather than LIST on ``state`` and RANGE
under it: ``ended_at`` alone says both "live or not" (NULL) and "which day", it is written
once when a job ends, and a claim can name the live partition with ``ended_at IS NULL``. A LIST
on ``state`` needs a second level and moves a row on changes that do not end the job.

Then, at each count of ended rows (spread evenly over the last ``--days`` days, inserted
with ``INSERT ... SELECT generate_series``, then ``VACUUM ANALYZE``) and beside ``--queued``
due queued jobs in both tables:

- ``claim``: the engine's claim statement (``Store.claim_statement``, 10 jobs, on the scratch
  table), ``--claims`` times, each in a transaction rolled back; the median and p95 in ms. On
  ``parted`` twice: as it is (no condition on the partition key: every partition's claim index
  is probed), and with ``ended_at IS NULL`` added to the pick and to the update's join (the
  planner keeps only ``live``); and one claim of each under ``EXPLAIN ANALYZE``: its planning
  and execution time and how many relations (tables and partitions) the plan reads;
- ``end``: ``--end`` claimed jobs end (state ``succeeded``, ``ended_at`` now) in batches of 100
  by id, as the keeper records outcomes; in ``parted`` each row moves from ``live`` to
  today's partition (a delete and an insert); rows per second;
- ``prune``: every ended row older than today is expired, the plain table by batched DELETEs,
  the partitioned one by ``DROP TABLE`` of each day's partition; rows per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import DEFAULT_URL, prepare_database  # noqa: E402 - needs the root on sys.path

SCHEMA = "bench_partitions"
SOURCE = "django_jobs_job"
STEPS = "django_jobs_jobstep"
BATCH = 2000  # maintenance.DEFAULT_BATCH_SIZE
LIVE_CHECK = "ended_at IS NULL"


def run(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def day(offset: int) -> datetime:
    """Midnight UTC ``offset`` days from today."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=offset)


def columns() -> list[str]:
    return [
        name
        for (name,) in run(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND table_schema = current_schema() ORDER BY ordinal_position",
            [SOURCE],
        )
    ]


def index_definitions() -> list[tuple[str, str, bool]]:
    """(name, CREATE INDEX text, unique) of the engine's table, the primary key left out."""
    rows = run(
        "SELECT i.relname, pg_get_indexdef(x.indexrelid), x.indisunique FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
        "WHERE t.relname = %s AND t.relnamespace = current_schema()::regnamespace "
        "AND NOT x.indisprimary",
        [SOURCE],
    )
    return [(name, text, unique) for name, text, unique in rows]


def create_tables(days: int) -> None:
    run(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    run(f"CREATE SCHEMA {SCHEMA}")
    run(f"CREATE TABLE {SCHEMA}.plain (LIKE {SOURCE} INCLUDING ALL)")
    run(f"CREATE TABLE {SCHEMA}.plain_steps (LIKE {STEPS} INCLUDING ALL)")
    run(f"CREATE SEQUENCE {SCHEMA}.parted_id")
    run(
        f"CREATE TABLE {SCHEMA}.parted (LIKE {SOURCE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
        "PARTITION BY RANGE (ended_at)"
    )
    # PostgreSQL 15 has no identity column on a partitioned table: a sequence stands in.
    run(f"ALTER TABLE {SCHEMA}.parted ALTER COLUMN id DROP IDENTITY IF EXISTS")
    run(f"ALTER TABLE {SCHEMA}.parted ALTER COLUMN id SET DEFAULT nextval('{SCHEMA}.parted_id')")
    run(
        f"CREATE TABLE {SCHEMA}.live PARTITION OF {SCHEMA}.parted "
        f"(CONSTRAINT live_only CHECK ({LIVE_CHECK})) DEFAULT"
    )
    for offset in range(-days, 2):
        add_day(offset)
    run(f"CREATE INDEX parted_id_idx ON {SCHEMA}.parted (id)")
    for name, text, unique in index_definitions():
        table = f"{SCHEMA}.live" if unique else f"{SCHEMA}.parted"
        text = text.replace(f" ON {SOURCE} ", f" ON {table} ", 1)
        text = text.replace(f" ON public.{SOURCE} ", f" ON {table} ", 1)
        text = text.replace(f"INDEX {name} ", f"INDEX parted_{name} ", 1)
        run(text)


def day_table(offset: int) -> str:
    return f"{SCHEMA}.d{day(offset):%Y%m%d}"


def add_day(offset: int) -> None:
    """A day's partition; the live partition's CHECK spares the scan of its rows."""
    run(
        f"CREATE TABLE {day_table(offset)} PARTITION OF {SCHEMA}.parted "
        f"FOR VALUES FROM ('{day(offset).isoformat()}') TO ('{day(offset + 1).isoformat()}')"
    )


def values(names: list[str], replaced: dict[str, str]) -> str:
    defaults = {
        "kind": "'bench.partitions'",
        "queue": "'default'",
        "engine": "'default'",
        "priority": "0",
        "attempts": "1",
        "max_attempts": "3",
        "log": "'[]'::jsonb",
        "version": "''",
        "cancel_requested": "false",
        "timestamps_derived": "false",
        "wake_requested": "false",
        "children_pending": "0",
        "children_total": "0",
    }
    return ", ".join(replaced.get(name, defaults.get(name, "NULL")) for name in names)


def fill(table: str, ended: int, queued: int, days: int) -> None:
    """``ended`` rows over the last ``days`` days (none today) and ``queued`` due jobs."""
    names = [name for name in columns() if name != "id"]
    span = days * 86_400 - 1
    if ended:
        stamp = f"now()::date - interval '{days} days' + (g * {span}.0 / {ended}) * interval '1s'"
        ended_values = values(
            names,
            {
                "state": "'succeeded'",
                "payload": "jsonb_build_object('n', g)",
                "idempotency_key": "'ended:' || g",
                "run_at": stamp,
                "created_at": stamp,
                "started_at": stamp,
                "ended_at": stamp,
            },
        )
        run(
            f"INSERT INTO {table} ({', '.join(names)}) SELECT {ended_values} "
            f"FROM generate_series(1, {ended}) AS g"
        )
    queued_values = values(
        names,
        {
            "state": "'queued'",
            "attempts": "0",
            "payload": "jsonb_build_object('q', g)",
            "idempotency_key": "'queued:' || g",
            "run_at": "now() - interval '1 minute' + g * interval '1 microsecond'",
            "created_at": "now() - interval '1 minute'",
        },
    )
    run(
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {queued_values} "
        f"FROM generate_series(1, {queued}) AS g"
    )
    run(f"VACUUM ANALYZE {table}")


def claim_sql(table: str, *, live_only: bool) -> tuple[str, list[Any]]:
    from django_jobs.store import get_store
    from django_jobs.store.base import TABLE, Claim

    now = datetime.now(UTC)
    statement, params = get_store().claim_statement(
        Claim(engine="default", worker_id="bench", limit=10, now=now, leased_until=now)
    )
    statement = statement.replace(TABLE, table)
    if live_only:
        # In the pick and in the update's join: both then read the live partition alone.
        statement = statement.replace(
            "state IN ('queued', 'waiting')", f"{LIVE_CHECK} AND state IN ('queued', 'waiting')"
        ).replace("WHERE j.id = picked.id", f"WHERE j.id = picked.id AND j.{LIVE_CHECK}")
    return statement, params


def claim_ms(table: str, claims: int, *, live_only: bool = False) -> tuple[float, float]:
    """Median and p95 of the claim statement, each in a transaction rolled back."""
    from django.db import connection, transaction

    statement, params = claim_sql(table, live_only=live_only)
    times = []
    for _ in range(claims):
        with transaction.atomic():
            began = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                if len(cursor.fetchall()) != 10:
                    raise SystemExit(f"the claim on {table} found fewer than 10 jobs")
            times.append((time.perf_counter() - began) * 1000)
            transaction.set_rollback(True)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)]


def explain(table: str, *, live_only: bool = False) -> tuple[float, float, int]:
    """One claim under ``EXPLAIN ANALYZE``, rolled back: (planning ms, execution ms, relations
    the plan reads)."""
    import json

    from django.db import connection, transaction

    statement, params = claim_sql(table, live_only=live_only)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params)
        value = cursor.fetchone()[0]
        [plan] = json.loads(value) if isinstance(value, str) else value
        transaction.set_rollback(True)
    relations: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            relations.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return plan["Planning Time"], plan["Execution Time"], len(relations)


def end_rate(table: str, count: int) -> float:
    """Claim ``count`` jobs (unmeasured), then end them 100 per statement: rows/s."""
    ids = [
        row[0]
        for row in run(
            f"UPDATE {table} SET state = 'running', worker_id = 'bench', attempts = 1, "
            f"started_at = now() WHERE id IN (SELECT id FROM {table} WHERE state = 'queued' "
            f"ORDER BY run_at LIMIT {count}) RETURNING id"
        )
    ]
    began = time.perf_counter()
    for start in range(0, len(ids), 100):
        run(
            f"UPDATE {table} AS j SET state = 'succeeded', ended_at = now(), result = NULL, "
            "worker_id = NULL, leased_until = NULL FROM unnest(%s::bigint[]) AS u(id) "
            "WHERE j.id = u.id AND j.worker_id = 'bench' AND j.state || '' = 'running'",
            [ids[start : start + 100]],
        )
    return len(ids) / (time.perf_counter() - began)


def prune_plain(cutoff: datetime) -> tuple[int, float]:
    """Delete the ended rows before ``cutoff`` as maintenance does: (rows, rows/s)."""
    from django.db import transaction

    deleted = 0
    began = time.perf_counter()
    while True:
        with transaction.atomic():
            ids = [
                row[0]
                for row in run(
                    f"SELECT id FROM {SCHEMA}.plain WHERE state IN "
                    "('succeeded', 'failed', 'cancelled') AND ended_at < %s "
                    f"ORDER BY ended_at LIMIT {BATCH} FOR UPDATE SKIP LOCKED",
                    [cutoff],
                )
            ]
            if not ids:
                break
            run(f"DELETE FROM {SCHEMA}.plain_steps WHERE job_id = ANY(%s)", [ids])
            run(f"DELETE FROM {SCHEMA}.plain WHERE id = ANY(%s)", [ids])
            deleted += len(ids)
    return deleted, deleted / max(time.perf_counter() - began, 1e-9)


def prune_parted(days: int) -> tuple[int, float, float]:
    """Drop every day partition before today: (rows, rows/s, ms per partition)."""
    from django.db import transaction

    tables = [day_table(offset) for offset in range(-days, 0)]
    rows = sum(run(f"SELECT count(*) FROM {table}")[0][0] for table in tables)
    began = time.perf_counter()
    for table in tables:
        with transaction.atomic():
            run(f"DROP TABLE {table}")
    seconds = time.perf_counter() - began
    return rows, rows / max(seconds, 1e-9), seconds / len(tables) * 1000


def sizes() -> dict[str, float]:
    return {
        name: run(f"SELECT pg_total_relation_size('{SCHEMA}.{name}')")[0][0] / 1024 / 1024
        for name in ("plain",)
    } | {
        "parted": run(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [f"{SCHEMA}.parted"],
        )[0][0]
        / 1024
        / 1024
    }


def measure(ended: int, args: argparse.Namespace) -> dict[str, Any]:
    create_tables(args.days)
    figures: dict[str, Any] = {"ended": ended}
    for table in ("plain", "parted"):
        began = time.perf_counter()
        fill(f"{SCHEMA}.{table}", ended, args.queued, args.days)
        figures[f"{table}_fill_s"] = time.perf_counter() - began
    figures["mib"] = sizes()
    figures["claim_plain"] = claim_ms(f"{SCHEMA}.plain", args.claims)
    figures["claim_parted"] = claim_ms(f"{SCHEMA}.parted", args.claims)
    figures["claim_parted_live"] = claim_ms(f"{SCHEMA}.parted", args.claims, live_only=True)
    figures["explain"] = {
        "plain": explain(f"{SCHEMA}.plain"),
        "parted": explain(f"{SCHEMA}.parted"),
        "parted_live": explain(f"{SCHEMA}.parted", live_only=True),
    }
    figures["end_plain"] = end_rate(f"{SCHEMA}.plain", args.end)
    figures["end_parted"] = end_rate(f"{SCHEMA}.parted", args.end)
    if ended:
        figures["prune_plain"] = prune_plain(day(0))
        figures["prune_parted"] = prune_parted(args.days)
        if figures["prune_plain"][0] != ended or figures["prune_parted"][0] != ended:
            raise SystemExit(
                f"expired {figures['prune_plain'][0]} and {figures['prune_parted'][0]} rows, "
                f"not {ended}"
            )
    figures["load"] = os.getloadavg()[0]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.partitions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--ended", default="0,1000000", help="comma-separated ended-row counts")
    parser.add_argument("--days", type=int, default=10, help="days the ended rows span")
    parser.add_argument("--queued", type=int, default=10_000, help="due queued jobs beside them")
    parser.add_argument("--claims", type=int, default=300, help="claims timed per table")
    parser.add_argument("--end", type=int, default=5_000, help="jobs ended per table")
    args = parser.parse_args(argv)
    counts = [int(part) for part in args.ended.split(",") if part.strip()]
    prepare_database(args.database_url)
    rows = []
    try:
        for ended in counts:
            print(f"{ended:,} ended rows over {args.days} days", flush=True)
            figures = measure(ended, args)
            rows.append(figures)
            print(f"  {figures}", flush=True)
    finally:
        run(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    print()
    print(
        "| ended rows | table and indexes, plain / parted (MiB) | claim p50 / p95 (ms): plain "
        "| parted | parted, `ended_at IS NULL` | end (rows/s): plain | parted "
        "| expiry (rows/s): plain DELETE | parted DROP (ms per day) | load |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for f in rows:
        expiry = (
            f"{f['prune_plain'][1]:,.0f} | {f['prune_parted'][1]:,.0f} "
            f"({f['prune_parted'][2]:,.1f})"
            if f["ended"]
            else "- | -"
        )
        print(
            f"| {f['ended']:,} | {f['mib']['plain']:,.0f} / {f['mib']['parted']:,.0f} "
            f"| {f['claim_plain'][0]:.2f} / {f['claim_plain'][1]:.2f} "
            f"| {f['claim_parted'][0]:.2f} / {f['claim_parted'][1]:.2f} "
            f"| {f['claim_parted_live'][0]:.2f} / {f['claim_parted_live'][1]:.2f} "
            f"| {f['end_plain']:,.0f} | {f['end_parted']:,.0f} | {expiry} | {f['load']:.2f} |"
        )
    print()
    print(
        "| ended rows | one claim, planning / execution (ms), relations read: plain | parted "
        "| parted, `ended_at IS NULL` |"
    )
    print("| ---: | ---: | ---: | ---: |")
    for f in rows:
        cells = " | ".join(
            f"{plan:.2f} / {execute:.2f}, {read}"
            for plan, execute, read in (f["explain"][k] for k in ("plain", "parted", "parted_live"))
        )
        print(f"| {f['ended']:,} | {cells} |")
    print()
    print(
        f"{args.queued:,} due queued jobs beside the ended rows, which span {args.days} days "
        f"({args.days + 2} day partitions); {args.claims} claims of 10 per table; "
        f"{os.cpu_count()} CPUs shared with other work"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
