"""The distribution is not on PyPI yet: no page and no message tells a user to
``pip install "django-durable-jobs[extra]"`` from the index, where it finds nothing (or another
project). An extra is named with a form that installs: a checkout (``-e '.[extra]'``,
``path/to/checkout[extra]``) or the repository (``django-durable-jobs[extra] @ git+URL``)."""

from __future__ import annotations

import re
import tomllib

from .blocks import ROOT

FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "django_jobs").rglob("*.py")),
]
FROM_THE_INDEX = re.compile(r"""(?<![\w/.-])django-durable-jobs\[[\w,]+\](?!\s*@)""")


def test_no_install_hint_names_the_distribution_on_the_package_index() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in FILES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "pip install" in line and FROM_THE_INDEX.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_repository_forms_name_the_projects_own_distribution_and_url() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    url = project["urls"]["Source"]
    text = (ROOT / "docs" / "getting-started.md").read_text()
    assert f"pip install '{project['name']}[mcp] @ git+{url}'" in text
    assert "pip install -e '.[mcp]'" in text
    for extra in ("asgi", "postgres", "redis", "mcp"):
        assert extra in project["optional-dependencies"]
