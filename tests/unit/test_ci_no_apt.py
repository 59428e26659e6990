"""``CI_NO_APT=1``: .ci/run installs nothing as root, and the tests that need those packages
(Chromium, PgBouncer) skip instead of failing, even where the packages are installed."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

NEEDS_APT = [
    "tests/integration/test_pgbouncer.py",
    "tests/integration/test_browser.py",
    "tests/integration/test_admin_browser.py",
]


def test_the_browser_and_pgbouncer_tests_skip_with_ci_no_apt(tmp_path) -> None:
    env = {**os.environ, "CI_NO_APT": "1", "SQLITE_TEST_PATH": str(tmp_path / "t.sqlite3")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly", *NEEDS_APT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" not in done.stdout and " failed" not in done.stdout, done.stdout
    assert "CI_NO_APT=1: the browser and PgBouncer tests are off" in done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert "skipped" in summary, summary


def test_ci_run_installs_nothing_with_ci_no_apt() -> None:
    """The apt-get lines of .ci/run are all inside the branch that CI_NO_APT=1 skips."""
    script = (ROOT / ".ci" / "run").read_text()
    branch = script.index('if [ "${CI_NO_APT:-}" = 1 ]; then')
    closing = script.index("\nfi\n", branch)
    lines = [n for n, line in enumerate(script.splitlines()) if "apt-get install -y" in line]
    first_line = script[:branch].count("\n")
    last_line = script[:closing].count("\n")
    assert lines and all(first_line < n <= last_line for n in lines)
