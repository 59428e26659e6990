"""Each system check id means one thing: it is emitted by one check function only, and
docs/configuration.md lists it.

The ids are read from the package's source (``id="django_jobs.E001"`` in a call), so a check
added anywhere, with an id another check already uses, fails here.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_jobs"
DOCS = PACKAGE.parent / "docs" / "configuration.md"
CHECK_ID = re.compile(r"django_jobs\.[CDEIW]\d{3}")


def emitted_ids() -> dict[str, set[str]]:
    """Each check id -> the functions (``module:Class.function``) whose calls pass it as id=."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", ".")

        def visit(node: ast.AST, where: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    # A nested function belongs to the check function around it.
                    nested = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    visit(child, where if nested else f"{where}.{child.name}".lstrip("."))
                    continue
                if isinstance(child, ast.Call):
                    for keyword in child.keywords:
                        value = keyword.value
                        if (
                            keyword.arg == "id"
                            and isinstance(value, ast.Constant)
                            and isinstance(value.value, str)
                            and CHECK_ID.fullmatch(value.value)
                        ):
                            found[value.value].add(f"{module}:{where}")
                visit(child, where)

        visit(ast.parse(path.read_text(), str(path)), "")
    return found


def test_the_source_has_check_ids():
    ids = emitted_ids()
    assert {"django_jobs.E001", "django_jobs.E101", "django_jobs.E201"} <= set(ids)
    assert ids["django_jobs.E001"] == {"django_jobs.checks:check_jobs_settings"}


def test_each_check_id_is_emitted_by_one_check_function():
    shared = {cid: sorted(where) for cid, where in emitted_ids().items() if len(where) > 1}
    assert not shared, f"one id, several checks (give each its own id): {shared}"


def test_each_check_id_is_documented():
    documented = set(CHECK_ID.findall(DOCS.read_text()))
    assert set(emitted_ids()) <= documented
