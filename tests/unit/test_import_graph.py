"""No import circle in ``django_jobs`` or ``bench``, counting every import.

``lint-imports`` (pyproject.toml) holds the layers; its ``acyclic_siblings`` contract cannot see a
circle that runs through a package's own ``__init__``, and type-only or call-time imports are
easy to wave through. This test builds the whole graph with grimp (every import: module level,
``if TYPE_CHECKING:`` and inside functions) and fails on any strongly connected component of more
than one module.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")  # the ``dev`` extra (import-linter's graph builder)

ROOT = Path(__file__).resolve().parents[2]


def circles(graph: object) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    modules = sorted(graph.modules)  # type: ignore[attr-defined]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep graph does not reach the recursion limit.
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]  # type: ignore[attr-defined]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append(
                        (nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt))))  # type: ignore[attr-defined]
                    )
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return sorted(found)


@pytest.fixture(scope="module")
def graph() -> object:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # bench/ is a package at the root, not installed
    return grimp.build_graph(
        "django_jobs", "bench", exclude_type_checking_imports=False, cache_dir=None
    )


def test_no_module_of_django_jobs_or_bench_is_in_an_import_circle(graph):
    assert circles(graph) == []


def test_the_check_finds_a_circle_through_a_type_only_import():
    class Graph:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, module: str) -> set[str]:
            return self.edges.get(module, set())

    assert circles(Graph()) == [["a", "b", "c"]]
