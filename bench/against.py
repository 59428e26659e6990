"""``python -m bench --against REV``: every django_jobs figure of a revision beside the working
tree's, in one run.

The revision is checked out with ``git worktree add --detach`` into a temporary folder (outside
the repository, removed at the end). Only its ``django_jobs`` package is used: a folder that
holds nothing but a link to it goes first on ``PYTHONPATH``, and the processes run with ``-P``
(no script or current folder put before it), so the harness (``bench/``, ``testproject/``,
``manage.py``) is the working tree's on both sides and only the engine differs. Each process
checks the engine it imported (``bench.apps``, ``BENCH_ENGINE``): a side that ran the wrong
engine stops the run.

Each repetition runs, for each group of figures (enqueue and drain, async, steps, pickup), one
``python -P -m bench --side ...`` subprocess per side, one after the other, so a figure's two
measurements are seconds apart; the side that goes first alternates between repetitions. The
subprocess measures its figures once (the same counts on both sides) and writes them to a
JSON file. Each side has a
database of its own on the same server (the revision's: the benchmark database's name +
``_rev``), migrated by that side's engine: a revision with fewer (or other) migrations never
meets a schema it does not know, and nothing migrates backwards between repetitions. Every
table is emptied before each figure, as in a plain run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from bench import report

ROOT = Path(__file__).resolve().parent.parent
WORK, REV = "working tree", "rev"


@dataclass
class Revision:
    """A checked-out revision: its commit, its worktree, and the folder to put on the path."""

    rev: str
    commit: str
    worktree: Path
    path: Path  # holds only ``django_jobs`` -> the worktree's


def resolve(repo: Path, rev: str) -> str:
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise SystemExit(f"--against: {rev!r} is not a commit of {repo}: {found.stderr.strip()}")
    return found.stdout.strip()


def check_out(repo: Path, rev: str, into: Path) -> Revision:
    """A detached worktree of ``rev`` under ``into`` (a folder outside the repository), and the
    import folder that exposes only its ``django_jobs``."""
    commit = resolve(repo, rev)
    worktree = into / f"src-{commit[:12]}"
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(worktree), commit],
        check=True,
    )
    if not (worktree / "django_jobs" / "__init__.py").is_file():
        remove(repo, worktree)
        raise SystemExit(f"--against: {rev} has no django_jobs package.")
    compile_engine(worktree / "django_jobs")
    path = into / "path"
    path.mkdir()
    (path / "django_jobs").symlink_to(worktree / "django_jobs", target_is_directory=True)
    return Revision(rev, commit, worktree, path)


def compile_engine(package: Path) -> None:
    """Byte-compile an engine before it is measured: a fresh checkout has no ``__pycache__``,
    and the modules a worker imports lazily would otherwise be compiled inside its timings."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)


def remove(repo: Path, worktree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "remove", "--force", str(worktree)],
        check=False,
        capture_output=True,
    )


def side_environment(engine: Path, path: Path | None) -> dict[str, str]:
    """The environment of a side's processes: ``path`` (the revision's import folder, or None
    for the working tree) first on ``PYTHONPATH``, then the repository root; ``BENCH_ENGINE``
    is the ``django_jobs`` folder every process of the side must import."""
    entries = [str(path)] if path is not None else []
    entries.append(str(ROOT))
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(entries),
        "BENCH_ENGINE": str(engine.resolve()),
    }


def side_url(url: str, side: str) -> str:
    """The working tree keeps the benchmark database; the revision gets the same name + _rev."""
    if side == WORK:
        return url
    parsed = urlparse(url)
    name = unquote(parsed.path.lstrip("/"))
    return parsed._replace(path=f"/{name}_rev").geturl()


def order(repetition: int) -> tuple[str, str]:
    """Which side goes first: the revision in odd repetitions (1, 3, ...), the working tree in
    even ones, so neither always runs on the warmer (or the more loaded) machine."""
    return (REV, WORK) if repetition % 2 else (WORK, REV)


#: The figures one side's subprocess measures at a time: both sides measure a group before the
#: next one starts, so a figure's two measurements are seconds apart, not a whole suite apart.
GROUPS = (
    {"enqueue", "drain"},
    {"async"},
    {"steps"},
    {"pickup"},
    {"phases"},
    {"fanout"},
    {"memory"},
)
#: Groups measured with the live events off whatever ``--live-events`` says: their commands
#: (``bench.phases``, ``bench.fanout``) measure the engine alone.
ENGINE_ALONE = ({"phases"}, {"fanout"})


def groups(only: set[str]) -> list[set[str]]:
    return [group & only for group in GROUPS if group & only]


@dataclass
class Side:
    name: str
    env: dict[str, str]
    url: str
    runs: report.Runs = field(default_factory=dict)
    engine: str = ""
    migration: str = ""


def measure(side: Side, args: argparse.Namespace, only: set[str], tag: str, out: Path) -> None:
    """One repetition of every figure for one side, in a subprocess of that side's engine."""
    command = [
        sys.executable,
        "-P",
        "-m",
        "bench",
        "--side",
        side.name,
        "--runs",
        "1",
        "--only",
        ",".join(sorted(only)),
        "--jobs",
        str(args.jobs),
        "--batch",
        str(args.batch),
        "--pickup-jobs",
        str(args.pickup_jobs),
        "--pickup-gap",
        str(args.pickup_gap),
        "--pickup-concurrency",
        str(args.pickup_concurrency),
        "--live-events",
        "off" if only in ENGINE_ALONE else args.live_events,
        "--database-url",
        side.url,
        "--tag",
        tag,
        "--json",
        str(out),
    ]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=side.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        print(f"  [{side.name}] {line.rstrip()}", flush=True)
    if process.wait() != 0:
        raise SystemExit(f"The {side.name} side exited with {process.returncode}.")
    found = json.loads(out.read_text())
    for name, values in found["runs"].items():
        side.runs.setdefault(name, []).extend(values)
    side.engine, side.migration = found["engine"], found["migration"]


def run(args: argparse.Namespace, only: set[str]) -> int:
    only = only - {"peers", "dbos", "stepskill"}  # the peers are no part of the engine
    if not only:
        raise SystemExit("--against measures django_jobs' figures: --only has none of them.")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="django_jobs-bench-against-") as folder:
        revision = check_out(ROOT, args.against, Path(folder))
        compile_engine(ROOT / "django_jobs")  # the same start for the working tree's
        try:
            sides = {
                WORK: Side(WORK, side_environment(ROOT / "django_jobs", None), args.database_url),
                REV: Side(
                    REV,
                    side_environment(revision.path / "django_jobs", revision.path),
                    side_url(args.database_url, REV),
                ),
            }
            stamp = time.strftime("%Y%m%d%H%M%S")
            for repetition in range(1, args.runs + 1):
                first, second = order(repetition)
                print(f"run {repetition}/{args.runs}: {first} first", flush=True)
                for number, group in enumerate(groups(only)):
                    for name in (first, second):
                        out = Path(folder) / f"{name.replace(' ', '-')}-{repetition}-{number}.json"
                        tag = f"{stamp}-{repetition}-{number}-{name}"
                        measure(sides[name], args, group, tag, out)
        finally:
            remove(ROOT, revision.worktree)
    load_after = os.getloadavg()
    work, rev = sides[WORK], sides[REV]
    print()
    print(f"against {args.against} ({revision.commit[:12]})")
    for side in (work, rev):
        database = unquote(urlparse(side.url).path.lstrip("/"))
        print(
            f"  {side.name:<13} django_jobs from {side.engine}; "
            f"migrated to {side.migration}; database {database}"
        )
    print(
        f"  {args.runs} repetition(s) of {args.jobs:,} jobs (batches of {args.batch:,}, pickup "
        f"{args.pickup_jobs} jobs {args.pickup_gap:g} ms apart), live events {args.live_events}; "
        f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}, on "
        f"{os.cpu_count()} CPUs"
    )
    print()
    print(report.against_table(work.runs, rev.runs))
    print()
    print(report.NOISE_RULE)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "against": args.against,
                    "commit": revision.commit,
                    "engines": {WORK: work.engine, REV: rev.engine},
                    "runs": {WORK: work.runs, REV: rev.runs},
                },
                indent=2,
            )
        )
    return 0
