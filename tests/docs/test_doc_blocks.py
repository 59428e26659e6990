"""Docs are code: every ```python block of README.md and docs/*.md runs here.

One test per page: its blocks run in order in one namespace, on the test database (see
docs/contributing.md for what a block may assume and how settings, urls, modules and tests in
a block are run). A failure names the page and the first line of the block.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .blocks import ROOT, BlockFailed, parse, run_page

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize(
    "page", [pytest.param(page, id=str(page.relative_to(ROOT))) for page in PAGES]
)
def test_page(page: Path, db: None) -> None:
    run_page(page)


def test_every_page_with_python_is_covered() -> None:
    pages = {page.name for page in PAGES if any(not b.setup for b in parse(page))}
    assert {
        "README.md",
        "getting-started.md",
        "jobs.md",
        "workflows.md",
        "migrating-from-celery.md",
    } <= pages


def test_a_failing_block_names_its_page_and_first_line(tmp_path: Path, db: None) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```python\nx = 1\n```\n\ntext\n\n```python\n\ny = x + 1\nassert y == 3\n```\n"
    )
    with pytest.raises(BlockFailed) as failed:
        run_page(page)
    assert failed.value.block.line == 10
    assert str(failed.value).startswith(f"{page}:10: ")
    assert "line 12" in str(failed.value)  # the traceback counts the page's lines


def test_a_setup_comment_runs_before_the_blocks_after_it(tmp_path: Path, db: None) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- setup:\nVALUE = 41\nmodule('example_app.helpers', double=lambda n: 2 * n)\n-->\n"
        "```python\nfrom example_app.helpers import double\n\nassert double(VALUE + 1) == 84\n```\n"
    )
    assert run_page(page) == 2
    import sys

    assert "example_app.helpers" not in sys.modules  # the page's modules end with it


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


@pytest.mark.parametrize(
    ("fragment", "problem"),
    [
        ('JOBS = {"LEASE": "soon"}', "JOBS: "),
        ('JOBS = {"ENGINES": {"default": {"concurrency": 0}}}', "JOBS: "),
        ('INSTALLED_APPS = [..., "django_jobz"]', "'django_jobz' is not an app"),
        ("REDIS = {}", "REDIS is not a setting"),
        ('TASKS = {"default": {"BACKEND": "django_jobs.tasks.NoBackend"}}', "TASKS['default']"),
    ],
)
def test_a_settings_fragment_is_checked(
    tmp_path: Path, db: None, fragment: str, problem: str
) -> None:
    page = _page(tmp_path, f"```python\n# settings.py\n{fragment}\n```\n")
    with pytest.raises(BlockFailed, match=r"page.md:2: ") as failed:
        run_page(page)
    assert problem in str(failed.value)


def test_a_urls_fragment_is_checked(tmp_path: Path, db: None) -> None:
    good = "# urls.py\nfrom django.urls import include, path\n\nurlpatterns = [\n    ...,\n"
    good += '    path("api/jobs/", include("django_jobs.urls")),\n]\n'
    assert run_page(_page(tmp_path, f"```python\n{good}```\n")) == 1
    bad = "# urls.py\nurlpatterns = [..., 'api/jobs/']\n"
    with pytest.raises(BlockFailed, match=r"is not a path\(\)"):
        run_page(_page(tmp_path, f"```python\n{bad}```\n"))


def test_the_tests_a_block_defines_run_and_must_pass(tmp_path: Path, db: None) -> None:
    case = (
        "from django.test import TestCase\n\n\nclass Sums(TestCase):\n"
        "    def test_sum(self):\n        self.assertEqual(1 + 1, 3)\n"
    )
    with pytest.raises(BlockFailed, match=r"(?s)Sums.test_sum.*AssertionError"):
        run_page(_page(tmp_path, f"```python\n{case}```\n"))
    function = "def test_sum(db):\n    assert 1 + 1 == 3\n"
    with pytest.raises(BlockFailed, match="AssertionError"):
        run_page(_page(tmp_path, f"```python\n{function}```\n"))


def test_a_page_kind_that_the_project_has_is_its_own_while_the_page_runs(
    tmp_path: Path, db: None
) -> None:
    from django_jobs.kinds.registry import get

    project = get("demo.hello")
    page = _page(
        tmp_path,
        "```python\nfrom django_jobs import job\n\n\n"
        '@job("demo.hello", idempotency_key="payload")\ndef hello(ctx):\n    return "page"\n\n\n'
        'assert job is not None and hello.func(None) == "page"\n'
        '@job("docs.only", idempotency_key="payload")\ndef only(ctx): ...\n```\n',
    )
    run_page(page)
    assert get("demo.hello") is project
    assert get("docs.only") is None


def test_a_failing_setup_comment_names_its_first_line(tmp_path: Path, db: None) -> None:
    with pytest.raises(BlockFailed, match=r"page.md:3: the setup block") as failed:
        run_page(_page(tmp_path, "text\n\n<!-- setup: assert 1 == 2 -->\n"))
    assert 'page.md", line 3' in str(failed.value)
    with pytest.raises(BlockFailed, match=r"page.md:2: the setup block") as failed:
        run_page(_page(tmp_path, "<!-- setup:\nx = 1\n\nassert x == 2\n-->\n"))
    assert 'page.md", line 4' in str(failed.value)


def test_a_function_no_block_calls_may_use_only_names_that_exist(tmp_path: Path, db: None) -> None:
    text = "```python\nimport math\n\n\ndef area(r):\n    return math.pi * square(r)\n```\n"
    with pytest.raises(BlockFailed, match=r"page.md:2: (?s:.*)area \(line 5\) uses square"):
        run_page(_page(tmp_path, text))
    defined = "<!-- setup:\ndef square(r):\n    return r * r\n-->\n\n" + text
    assert run_page(_page(tmp_path, defined)) == 2


def test_a_postgresql_databases_fragment_connects_to_the_local_server(
    tmp_path: Path, db: None
) -> None:
    """A fragment reading libpq's variables connects to the tests' PostgreSQL; a pool with
    persistent connections, which Django refuses, fails the page."""
    fragment = (
        "# settings.py\nimport os\n\nDATABASES = {\n    'default': {\n"
        "        'ENGINE': 'django.db.backends.postgresql',\n"
        "        'HOST': os.environ['PGHOST'], 'PORT': os.environ['PGPORT'],\n"
        "        'NAME': os.environ['PGDATABASE'], 'USER': os.environ['PGUSER'],\n"
        "        'PASSWORD': os.environ['PGPASSWORD'], 'CONN_MAX_AGE': SECONDS,\n"
        "        'OPTIONS': {'pool': True},\n    }\n}\n"
    )
    assert run_page(_page(tmp_path, f"```python\n{fragment.replace('SECONDS', '0')}```\n")) == 1
    with pytest.raises(BlockFailed, match="persistent connections"):
        run_page(_page(tmp_path, f"```python\n{fragment.replace('SECONDS', '60')}```\n"))


def test_client_scripts_are_on_the_page_whose_install_test_runs_them() -> None:
    """``# client.py`` blocks call a live server: only tests/install/test_getting_started.py
    starts one (for docs/getting-started.md), so that page alone may have them."""
    from .blocks import CLIENT_SCRIPT

    pages = {p.name for p in PAGES if any(CLIENT_SCRIPT.match(b.head) for b in parse(p))}
    assert pages <= {"getting-started.md"}
    test = (ROOT / "tests" / "install" / "test_getting_started.py").read_text()
    assert "# client.py" in test
