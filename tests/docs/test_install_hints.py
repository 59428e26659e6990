"""The distribution is not on PyPI yet: no page and no message tells a user to
``pip install "django-durable-jobs[extra]"`` from the index, where it finds nothing (or another
project). An extra is named with a form that installs: a checkout (``-e '.[extra]'``,
``path/to/checkout[extra]``) or the repository (``django-durable-jobs[extra] @ git+URL``).

The rule of ``test_every_named_extra_comes_with_the_forms_that_install_it``, for every extra of
pyproject's ``[project.optional-dependencies]`` but the development ones (those that require
the project itself with other extras, today ``test`` and ``dev``: they bring the test suite's
tools, and the test suite is only in a checkout):

- **Where.** README.md and docs/*.md, cut into units: a paragraph, a list item, a table row, a
  heading, a fenced block (a paragraph that ends with ``:`` and the block right after it are one
  unit); and the string literals of django_jobs' Python sources (help texts, check hints, error
  messages; an implicitly concatenated literal or an f-string is one unit; docstrings are left
  out). Line breaks and runs of spaces count as one space. The section of getting-started.md
  that the others link to, "Install the app in your project", shows the forms once for every
  extra and is left out.
- **A mention** of an extra ``name``: the name, bare or quoted (in any case), before the word
  ``extra`` or ``extras`` (``the `asgi` extra``, ``the mcp extra``, ``the `asgi` and `postgres`
  extras``); a name in backticks in the list after ``extras:`` (to the end of the sentence or
  of the parenthesis); or ``[name]`` (``[a,name]``) right after a name or a path (``.[mcp]``,
  ``path/to/checkout[asgi]``, ``django-durable-jobs[mcp]``).
- **The unit** then either shows both forms for that extra, the path form (``.[name]`` or
  ``some/path[name]``) and the repository's form (``django-durable-jobs[name] @ git+`` and the
  project's Source URL), or links to the install section
  (``getting-started.md#install-the-app-in-your-project``; in getting-started.md itself
  ``](#install-the-app-in-your-project)``).
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from .blocks import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = sorted((ROOT / "django_jobs").rglob("*.py"))
FILES = [*PAGES, *SOURCES]
FROM_THE_INDEX = re.compile(r"""(?<![\w/.-])django-durable-jobs\[[\w,]+\](?!\s*@)""")

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
INSTALL_SECTION = "Install the app in your project"
ANCHOR = "install-the-app-in-your-project"
LINK = re.compile(rf"getting-started\.md#{ANCHOR}\b|\]\(#{ANCHOR}\)")

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
QUOTED_NAME = r"""[`"']*[\w-]+[`"']*"""
#: ``the `asgi` extra``, ``the `asgi` and `postgres` extras``: the names before "extra(s)".
BEFORE_EXTRA = re.compile(
    rf"((?:{QUOTED_NAME}(?:,\s*|\s+(?:and|or)\s+))*{QUOTED_NAME})\s+extras?\b", re.IGNORECASE
)
#: ``extras: `asgi` for daphne, `postgres` ...``: to the end of the sentence or parenthesis.
EXTRAS_LIST = re.compile(r"\bextras?:((?:[^.()`]|`[^`]*`)*)", re.IGNORECASE)
#: ``.[mcp]``, ``checkout[asgi,postgres]``, ``django-durable-jobs[mcp]``; the name or path
#: before the brackets, and a version specifier after them, if any.
BRACKETS = re.compile(r"([\w./~-]+)\[([\w-]+(?:,\s*[\w-]+)*)\](\s*(?:==|>=|<=|~=|!=|<|>))?")


def extras_to_check() -> set[str]:
    extras: dict[str, list[str]] = PROJECT["optional-dependencies"]
    itself = re.compile(rf"^{re.escape(PROJECT['name'])}\s*\[")
    return {name for name, reqs in extras.items() if not any(itself.match(r) for r in reqs)}


def markdown_units(path: Path) -> Iterator[tuple[int, str]]:
    """(first line, text) of each unit of a page, but those of getting-started's install
    section."""
    units: list[tuple[int, list[str], str, bool]] = []  # line, lines, section, a fenced block
    current: list[str] = []
    start, section, fence = 0, "", ""

    def close() -> None:
        nonlocal current
        if current:
            units.append((start, current, section, False))
        current = []

    for n, line in enumerate(path.read_text().splitlines(), 1):
        if fence:
            current.append(line)
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = ""
                block = current
                current = []
                if units and not units[-1][3] and units[-1][1][-1].rstrip().endswith(":"):
                    first, lines, sect, _ = units.pop()
                    units.append((first, [*lines, *block], sect, True))
                else:
                    units.append((start, block, section, True))
            continue
        if opening := FENCE.match(line):
            close()
            fence, start, current = opening.group(1), n, [line]
            continue
        stripped = line.strip()
        if not stripped:
            close()
        elif stripped.startswith("#") or stripped.startswith("|"):
            close()
            if stripped.startswith("## "):
                section = stripped[3:].strip()
            units.append((n, [line], section, False))
        else:
            if LIST_ITEM.match(line):
                close()
            if not current:
                start = n
            current.append(line)
    close()
    in_getting_started = path.name == "getting-started.md"
    for first, lines, sect, _ in units:
        if not (in_getting_started and sect == INSTALL_SECTION):
            yield first, " ".join(lines)


def python_units(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each string literal of a module but its docstrings."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skipped.add(id(body[0].value))
        elif isinstance(node, ast.JoinedStr):
            skipped.update(id(part) for part in node.values)
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
            )
            yield node.lineno, text
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in skipped:
                yield node.lineno, node.value


def mentioned(text: str, extras: set[str]) -> set[str]:
    names: set[str] = set()
    for match in BEFORE_EXTRA.finditer(text):
        names.update(n.lower() for n in re.findall(r"[\w-]+", match.group(1)))
    for match in EXTRAS_LIST.finditer(text):
        names.update(n.lower() for n in re.findall(r"`([\w-]+)`", match.group(1)))
    for match in BRACKETS.finditer(text):
        before, inside, version = match.groups()
        if version and before != PROJECT["name"] and re.fullmatch(r"[A-Za-z][\w-]*", before):
            continue  # another distribution's extra, pinned: ``celery[redis]==5.*``
        names.update(re.split(r",\s*", inside))
    return names & extras


def installs(text: str, extra: str) -> bool:
    """Both forms for ``extra`` in ``text``, or the link to the install section."""
    if LINK.search(text):
        return True
    brackets = rf"\[(?:[\w-]+,\s*)*{re.escape(extra)}(?:,\s*[\w-]+)*\]"
    path_form = rf"(?:(?<![\w/.~-])\.|[\w.~-]*/[\w./~-]*){brackets}"
    repository_form = (
        rf"{re.escape(PROJECT['name'])}{brackets}\s*@\s*git\+{re.escape(PROJECT['urls']['Source'])}"
    )
    return bool(re.search(path_form, text)) and bool(re.search(repository_form, text))


def test_no_install_hint_names_the_distribution_on_the_package_index() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in FILES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "pip install" in line and FROM_THE_INDEX.search(line)
    ]
    assert not found, "\n".join(found)


def test_every_named_extra_comes_with_the_forms_that_install_it() -> None:
    extras = extras_to_check()
    assert {"asgi", "postgres", "redis", "mcp", "otel"} <= extras, extras
    found = []
    for path in FILES:
        units = markdown_units(path) if path.suffix == ".md" else python_units(path)
        for n, raw in units:
            text = re.sub(r"\s+", " ", raw)
            missing = sorted(e for e in mentioned(text, extras) if not installs(text, e))
            if missing:
                found.append(f"{path.relative_to(ROOT)}:{n}: {', '.join(missing)}: {text[:160]}")
    assert not found, "no path form and repository form, nor link to the install section:\n" + (
        "\n".join(found)
    )


def test_the_repository_forms_name_the_projects_own_distribution_and_url() -> None:
    url = PROJECT["urls"]["Source"]
    text = (ROOT / "docs" / "getting-started.md").read_text()
    assert f"## {INSTALL_SECTION}\n" in text  # the anchor the pages and messages link to
    assert f"pip install '{PROJECT['name']}[mcp] @ git+{url}'" in text
    assert "pip install -e '.[mcp]'" in text
    for extra in ("asgi", "postgres", "redis", "mcp"):
        assert extra in PROJECT["optional-dependencies"]
