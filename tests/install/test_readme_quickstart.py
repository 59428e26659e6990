"""README.md's "Quick start in your project", applied to a fresh ``django-admin startproject``
with the installed package: ``migrate``, ``check`` and ``test`` pass untouched.

The quick start's block is applied as a reader would: its settings lines go at the end of
``settings.py`` and its ``urls.py`` lines at the end of ``urls.py``, each ``...`` standing for
what ``startproject`` wrote there (``*INSTALLED_APPS``, ``*urlpatterns``). Django's test runner
turns ``DEBUG`` off, with the ``django-insecure-`` key that ``startproject`` wrote: the
public-key check is a deploy warning (``django_jobs.W010``, ``check --deploy``), not an error
that stops ``manage.py test``.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from tests.install.conftest import Venv, page_blocks

pytestmark = pytest.mark.install


def quick_start() -> tuple[str, str]:
    """The settings and the urls lines of README.md's quick start."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Quick start in your project") :]
    block = page_blocks(section, "python")[0]
    settings, _, urls = block.partition("# urls.py\n")
    assert settings.startswith("# settings.py\n") and "include(" in urls
    return settings, urls


def test_a_new_project_with_the_readme_quick_start_migrates_checks_and_tests(
    installed: Venv, tmp_path
):
    settings, urls = quick_start()
    installed.run(["django-admin", "startproject", "mysite", tmp_path], cwd=tmp_path)
    with open(tmp_path / "mysite" / "settings.py", "a") as file:
        file.write("\n" + re.sub(r"^    \.\.\.,$", "    *INSTALLED_APPS,", settings, flags=re.M))
    with open(tmp_path / "mysite" / "urls.py", "a") as file:
        file.write("\n" + re.sub(r"^    \.\.\.,$", "    *urlpatterns,", urls, flags=re.M))

    installed.run(["python", "manage.py", "migrate"], cwd=tmp_path)
    checked = installed.run(["python", "manage.py", "check"], cwd=tmp_path)
    assert "django_jobs" not in checked.stdout + checked.stderr
    tested = installed.run(["python", "manage.py", "test"], cwd=tmp_path, check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "django_jobs" not in tested.stdout + tested.stderr
