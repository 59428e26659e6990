"""The distribution: its name (``django-durable-jobs``; PyPI's ``django-jobs`` is another
project), licence, links and dependencies, and the package installed from the wheel into a new
virtual environment, imported from outside the source tree."""

from __future__ import annotations

import re
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import django_jobs
from tests.conftest import ROOT
from tests.install.conftest import Venv

pytestmark = pytest.mark.install

NAME = "django-durable-jobs"


def metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode()), archive.namelist()


def test_the_wheel_is_django_durable_jobs_with_its_licence_and_links(wheel):
    meta, files = metadata(wheel)
    assert meta["Name"] == NAME
    assert meta["Version"] == django_jobs.__version__
    assert meta["License-Expression"] == "BSD-3-Clause"
    [licence] = [n for n in files if n.endswith("dist-info/licenses/LICENSE")]
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(licence).decode()
    assert "Copyright (c) 2026, the django_jobs authors" in text
    assert "Redistribution and use in source and binary forms" in text
    links = dict(line.split(", ", 1) for line in meta.get_all("Project-URL"))
    assert set(links) == {"Homepage", "Documentation", "Source", "Issues"}
    assert all(
        url.startswith("https://github.com/django-jobs/django-durable-jobs")
        for url in links.values()
    )
    assert {n.split("/")[0] for n in files} == {
        "django_jobs",
        f"django_durable_jobs-{django_jobs.__version__}.dist-info",
    }


def test_psycopg_is_only_in_the_postgres_and_test_extras(wheel):
    meta, _ = metadata(wheel)
    requires = meta.get_all("Requires-Dist")
    psycopg = [r for r in requires if r.startswith("psycopg")]
    assert psycopg and all(re.search(r'extra == "(postgres|test)"', r) for r in psycopg)
    assert any(r.startswith("daphne") and 'extra == "asgi"' in r for r in requires)
    own = [r for r in requires if r.split("[")[0] in ("django-jobs", NAME)]
    assert own and all(r.startswith(f"{NAME}[") for r in own)  # extras that name the project


def test_the_installed_package_imports_outside_the_source_tree(installed: Venv, tmp_path):
    probe = (
        "import importlib.metadata as m, django_jobs; "
        f"print(django_jobs.__file__); print(django_jobs.__version__, m.version('{NAME}'))"
    )
    done = installed.run([installed.python, "-c", probe], cwd=tmp_path)
    where, versions = done.stdout.split("\n")[:2]
    assert Path(where).is_relative_to(installed.path) and not Path(where).is_relative_to(ROOT)
    assert versions.split() == [django_jobs.__version__] * 2
    # SQLite users need no PostgreSQL driver: none is installed, and none was needed above.
    missing = installed.run([installed.python, "-c", "import psycopg"], cwd=tmp_path, check=False)
    assert "No module named 'psycopg'" in missing.stderr
    # About 15 s on a quiet machine with pip's cache; far more means pip builds something.
    assert installed.seconds < 180, f"making the environment took {installed.seconds:.0f}s"


def test_the_mcp_server_reports_the_package_version():
    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp")
    from django_jobs.mcp_server import build_server

    async def main():
        async with mcp.Client(build_server()) as client:
            return client.server_info

    info = anyio.run(main)
    assert (info.name, info.version) == ("django-jobs", django_jobs.__version__)


def test_no_install_line_names_the_other_projects_distribution():
    """``pip install "django-jobs[...]"`` would install PyPI's unrelated django-jobs."""
    places = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "tox.ini", ROOT / ".ci" / "run"]
    places += [*(ROOT / "docs").glob("*.md"), *(ROOT / "scripts").iterdir()]
    places += [*(ROOT / "django_jobs").rglob("*.py")]
    wrong = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in places
        if path.is_file() and path.exists()
        for line in path.read_text(errors="replace").splitlines()
        if re.search(r"django-jobs\[|pip install (\S+ )*django-jobs\b", line)
    ]
    assert wrong == []
