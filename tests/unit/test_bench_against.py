"""``python -m bench --against REV``: a revision's engine on one side's path, the harness the
working tree's on both, the order alternating (real git, real interpreters; no database)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

import bench
from bench import against
from bench.apps import BenchConfig

ROOT = Path(against.__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose first commit's engine says "old", the second's "new"."""
    repo = tmp_path / "repo"
    (repo / "django_jobs").mkdir(parents=True)
    git(repo, "init", "--quiet")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "config", "user.name", "bench")
    for marker in ("old", "new"):
        (repo / "django_jobs" / "__init__.py").write_text(f"MARKER = {marker!r}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "--quiet", "-m", marker)
    return repo


def test_a_side_imports_the_revisions_engine_and_the_working_trees_harness(repo, tmp_path):
    into = tmp_path / "against"
    into.mkdir()
    revision = against.check_out(repo, "HEAD~1", into)
    assert revision.commit == git(repo, "rev-parse", "HEAD~1")
    # Compiled before it is measured, as the working tree's already is.
    assert any((revision.worktree / "django_jobs" / "__pycache__").glob("__init__.*.pyc"))
    env = against.side_environment(revision.path / "django_jobs", revision.path)
    shown = subprocess.run(
        [
            sys.executable,
            "-P",
            "-c",
            "import bench, django_jobs; print(django_jobs.MARKER); print(django_jobs.__file__); "
            "print(bench.__file__)",
        ],
        cwd=ROOT,  # the working tree's own django_jobs is right here: -P keeps it off the path
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert shown[0] == "old"
    assert Path(shown[1]).resolve().parent == revision.worktree / "django_jobs"
    assert Path(env["BENCH_ENGINE"]) == (revision.worktree / "django_jobs").resolve()
    assert Path(shown[2]).resolve() == Path(bench.__file__).resolve()
    # The worktree is git's and goes away with it.
    assert str(revision.worktree) in git(repo, "worktree", "list")
    against.remove(repo, revision.worktree)
    assert not revision.worktree.exists()
    assert str(revision.worktree) not in git(repo, "worktree", "list")


def test_the_working_tree_side_imports_the_working_trees_engine():
    env = against.side_environment(ROOT / "django_jobs", None)
    shown = subprocess.run(
        [sys.executable, "-P", "-c", "import django_jobs; print(django_jobs.__file__)"],
        cwd="/",
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(shown).resolve().parent == (ROOT / "django_jobs").resolve()


def test_an_unknown_revision_is_refused(repo, tmp_path):
    with pytest.raises(SystemExit, match="not a commit"):
        against.check_out(repo, "no-such-branch", tmp_path)


def test_a_process_that_imported_another_engine_stops(monkeypatch, tmp_path):
    config = BenchConfig("bench", bench)
    monkeypatch.setenv("BENCH_LIVE_EVENTS", "1")
    monkeypatch.setenv("BENCH_ENGINE", str(tmp_path / "django_jobs"))
    with pytest.raises(ImproperlyConfigured, match="imported from"):
        config.ready()
    monkeypatch.setenv("BENCH_ENGINE", str(ROOT / "django_jobs"))
    config.ready()


def test_the_side_that_goes_first_alternates_and_the_revision_has_its_own_database():
    assert [against.order(n) for n in (1, 2, 3, 4)] == [
        (against.REV, against.WORK),
        (against.WORK, against.REV),
        (against.REV, against.WORK),
        (against.WORK, against.REV),
    ]
    url = "postgres://postgres@127.0.0.1:5432/jobs_bench"
    assert against.side_url(url, against.WORK) == url
    assert against.side_url(url, against.REV) == url + "_rev"


def test_both_sides_measure_a_group_of_figures_before_the_next_and_never_the_peers():
    assert against.groups({"pickup", "drain", "enqueue", "peers"}) == [
        {"enqueue", "drain"},
        {"pickup"},
    ]
    assert against.groups({"steps"}) == [{"steps"}]
    # The single-purpose modules' figures: each a group of its own.
    assert against.groups({"memory", "phases", "fanout"}) == [{"phases"}, {"fanout"}, {"memory"}]
    with pytest.raises(SystemExit, match="has none of them"):
        against.run(None, {"peers"})  # type: ignore[arg-type] - refused before args are read
