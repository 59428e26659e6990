"""The peers, measured beside django_jobs in each repetition: same no-op job, same counts.

Each peer's loop runs as a subprocess of the peers' own environment (``bench/peers_env.py``),
from the scripts in ``bench/peerside/``, one after the other; each prints its figures as
JSON. The bare psycopg loops write django_jobs' own job table (the floor the machine sets at
that moment, whatever the disk's flush time and the load); Procrastinate and Django's Tasks
database backend get a database of their own, the benchmark's name + ``_peers``, and DBOS
another, the name + ``_dbos``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

SCRIPTS = Path(__file__).resolve().parent / "peerside"

# (group, script, figure, extra arguments, database: "" for the engine's, else the suffix put
# after the benchmark's database name). A group runs right after django_jobs' figures of the
# same name (bench/run.py).
LOOPS: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("enqueue", "bare.py", "insert", (), ""),
    ("enqueue", "bare.py", "insert-notify", (), ""),
    ("enqueue", "bare.py", "insert-notify-tx", (), ""),
    ("enqueue", "procrastinate_loops.py", "enqueue", (), "_peers"),
    ("enqueue", "tasks_db_loops.py", "enqueue", (), "_peers"),
    ("enqueue_many", "bare.py", "insert-100", (), ""),
    ("enqueue_many", "bare.py", "multirow", (), ""),
    ("enqueue_many", "bare.py", "copy", (), ""),
    ("enqueue_many", "procrastinate_loops.py", "enqueue-many", (), "_peers"),
    ("drain", "bare.py", "drain", (), ""),
    ("drain", "procrastinate_loops.py", "drain", ("--concurrency", "1"), "_peers"),
    ("drain", "procrastinate_loops.py", "drain", ("--concurrency", "4"), "_peers"),
    ("drain", "tasks_db_loops.py", "drain", (), "_peers"),
    ("steps", "dbos_loops.py", "drain", ("--concurrency", "1"), "_dbos"),
    ("steps", "dbos_loops.py", "drain", ("--concurrency", "4"), "_dbos"),
    ("steps", "dbos_loops.py", "drain", ("--concurrency", "50"), "_dbos"),
    ("pickup", "bare.py", "pickup", (), ""),
    ("pickup", "procrastinate_loops.py", "pickup", (), "_peers"),
    ("pickup", "dbos_loops.py", "pickup", (), "_dbos"),
)
Loop = tuple[str, str, tuple[str, ...], str]
PEERS = ("bare", "procrastinate", "tasks-db", "dbos")
SCRIPT_OF = {
    "bare": "bare.py",
    "procrastinate": "procrastinate_loops.py",
    "tasks-db": "tasks_db_loops.py",
    "dbos": "dbos_loops.py",
}
#: The peers with a database of their own, and its suffix: DBOS's is apart from the others'
#: (its schema and its queue poller share nothing with theirs).
DATABASES = ("_peers", "_dbos")


def connect(url: str) -> Any:
    """An autocommit psycopg connection to ``url`` (this environment's psycopg)."""
    import psycopg

    parsed = urlparse(url)
    return psycopg.connect(
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 5432,
        user=unquote(parsed.username or "postgres"),
        password=unquote(parsed.password or "") or None,
        dbname=unquote(parsed.path.lstrip("/")),
        autocommit=True,
    )


def peers_url(bench_url: str, suffix: str = "_peers") -> str:
    """A peer's database: the benchmark's, with ``suffix`` after its name."""
    parsed = urlparse(bench_url)
    return parsed._replace(path=parsed.path.rstrip("/") + suffix).geturl()


def create_database(url: str) -> None:
    parsed = urlparse(url)
    name = unquote(parsed.path.lstrip("/"))
    with connect(parsed._replace(path="/postgres").geturl()) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            admin.execute(f'CREATE DATABASE "{name}"')


def selected(only: set[str], group: str) -> list[Loop]:
    """The loops of ``group`` of the peers in ``only`` (names of ``PEERS``)."""
    scripts = {SCRIPT_OF[peer] for peer in only}
    return [loop[1:] for loop in LOOPS if loop[0] == group and loop[1] in scripts]


def run_loops(
    python: Path,
    bench_url: str,
    loops: list[Loop],
    *,
    jobs: int,
    batch: int,
    pickup_jobs: int,
    pickup_gap: float,
) -> dict[str, float]:
    """Run ``loops`` one after the other; return every figure they printed."""
    figures: dict[str, float] = {}
    counts = [
        "--jobs",
        str(jobs),
        "--batch",
        str(batch),
        "--pickup-jobs",
        str(pickup_jobs),
        "--pickup-gap",
        str(pickup_gap),
    ]
    for script, figure, extra, database in loops:
        url = peers_url(bench_url, database) if database else bench_url
        done = subprocess.run(
            [str(python), str(SCRIPTS / script), figure, "--url", url, *counts, *extra],
            cwd=SCRIPTS,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0:
            raise SystemExit(
                f"The peer loop {script} {figure} exited {done.returncode}:\n"
                f"{done.stdout}{done.stderr}"
            )
        printed = json.loads(done.stdout.strip().splitlines()[-1])
        for name, value in printed.items():
            print(f"  {name:<32}{value:>12,.2f}", flush=True)
        figures.update(printed)
    return figures
