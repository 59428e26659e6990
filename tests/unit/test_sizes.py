"""No class over 300 lines and no module over 600 in ``django_jobs``: a newcomer can read a class
at one sitting and find a concern by its module's name. Counted from the source's own syntax
tree: a class from its ``class`` line to its last line, a module by its lines."""

from __future__ import annotations

import ast
from pathlib import Path

import django_jobs

PACKAGE = Path(django_jobs.__file__).resolve().parent
CLASS_LINES = 300
MODULE_LINES = 600


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def name(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_no_module_is_over_600_lines():
    over = {
        name(path): lines
        for path in sources()
        if (lines := path.read_text().count("\n")) > MODULE_LINES
    }
    assert over == {}


def test_no_class_is_over_300_lines():
    over = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > CLASS_LINES:
                    over[f"{name(path)}::{node.name}"] = lines
    assert over == {}
