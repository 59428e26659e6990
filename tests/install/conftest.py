"""The package as a new user gets it: a wheel built from this checkout, installed with its
dependencies into a virtual environment of its own (no access to this checkout or to the test
environment's packages), used from directories outside the source tree.

The wheel and the environment are made once per test session (``pip`` resolves the
dependencies from the package index or pip's cache: about 15 to 30 s); each test makes its own
projects in its own temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

#: What ``pip wheel`` needs of the checkout to build the distribution.
SOURCES = ("pyproject.toml", "README.md", "LICENSE")
#: Variables of the test run that must not reach a new user's project.
PRIVATE = ("PYTEST", "DJANGO_", "SQLITE_", "PYTHON", "VIRTUAL_ENV", "JOBS_", "DATABASE_URL")
#: The Python of the new user's environment: the test run's, unless JOBS_INSTALL_PYTHON names
#: another (.ci/run runs these tests in its Python 3.11 environment, which has the least else to
#: do, with a new user's environment on the Python >= 3.12 of Django 6).
NEW_USERS_PYTHON = os.environ.get("JOBS_INSTALL_PYTHON") or sys.executable


def run(
    args: list[str | Path], *, timeout: float = 180, check: bool = True, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kwargs,  # type: ignore[arg-type]
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


@dataclass(frozen=True)
class Venv:
    """A virtual environment with the wheel installed; ``seconds``: how long that took."""

    path: Path
    seconds: float

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """A shell's environment with this virtual environment activated, and nothing of the
        test run's settings or paths."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE)}
        env.update(
            PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            VIRTUAL_ENV=str(self.path),
            PYTHONUNBUFFERED="1",
            **extra,
        )
        return env

    def run(self, args: list[str | Path], cwd: Path, **kwargs: object):
        kwargs.setdefault("env", self.env())
        return run(args, cwd=cwd, **kwargs)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built from a copy of its sources (the checkout is left
    untouched: no build/ or egg-info)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "django_jobs",
        source / "django_jobs",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out, source])
    [built] = out.glob("*.whl")
    return built


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A new virtual environment with ``pip install "<wheel>[asgi]"``, as docs/getting-started.md
    installs the checkout (``pip install "path/to/checkout[asgi]"``), and nothing else: the
    page's test example moves the clock with the standard library. No psycopg: the projects
    here are on SQLite."""
    path = tmp_path_factory.mktemp("venv")
    started = time.monotonic()
    # No pip of its own (ensurepip takes seconds): the test run's pip installs into it.
    run([NEW_USERS_PYTHON, "-m", "venv", "--clear", "--without-pip", path])
    venv = Venv(path, 0)
    install = [sys.executable, "-m", "pip", "--python", venv.python, "install"]
    env = venv.env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    run([*install, f"{wheel}[asgi]"], env=env, timeout=600)
    return Venv(path, time.monotonic() - started)


def page_blocks(page: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``page``, each as its text."""
    return re.findall(rf"^```{language}\n(.*?)^```", page, flags=re.M | re.S)
