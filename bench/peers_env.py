"""The peers' own virtual environment: ``.venv-bench-peers/`` at the repository root.

The peers (Procrastinate, Django's Tasks database backend, DBOS, Celery, bare psycopg) are
never dependencies of django_jobs: the benchmark installs them here, apart from the environment
that runs the engine, and runs each peer's loop as a subprocess of this environment's Python.
The environment is made on first use and made again when ``REQUIREMENTS`` change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-bench-peers"
# The current major version of each peer, as a user installs it today. Django's Tasks
# database backend lives in its own package (``django_tasks_db.DatabaseBackend``) since
# Django 6.0 ships the Tasks framework itself. Celery with its Redis transport, as its own
# docs install it (``bench.processes``: its prefork pool on CPU-bound work).
REQUIREMENTS = (
    "procrastinate==3.*",
    "django-tasks-db==0.*",
    "dbos==3.*",
    "psycopg[binary]==3.*",
    "celery[redis]==5.*",
)
PACKAGES = (
    "procrastinate",
    "django-tasks-db",
    "dbos",
    "sqlalchemy",
    "django",
    "psycopg",
    "psycopg-binary",
    "celery",
    "kombu",
    "redis",
)
STAMP = VENV / "requirements.json"


def python() -> Path:
    return VENV / "bin" / "python"


def ensure() -> Path:
    """The peers' Python, installing the environment first if it is missing or stale."""
    wanted = json.dumps(list(REQUIREMENTS))
    if python().exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return python()
    print(f"Installing the peers into {VENV.name}/: {' '.join(REQUIREMENTS)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run(
        [str(python()), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
        check=True,
    )
    STAMP.write_text(wanted)
    return python()


def versions() -> dict[str, str]:
    """The installed version of each peer package (and of the peers' Python)."""
    code = (
        "import json, sys\n"
        "from importlib.metadata import version, PackageNotFoundError\n"
        "found = {'python': sys.version.split()[0]}\n"
        f"for name in {list(PACKAGES)!r}:\n"
        "    try:\n"
        "        found[name] = version(name)\n"
        "    except PackageNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(found))\n"
    )
    out = subprocess.run([str(python()), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)
