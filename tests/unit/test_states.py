"""States are named by their constants, never spelled out, outside ``django_jobs/states.py``.

The rule, exactly: in every module of ``django_jobs/`` except ``states.py`` and
``migrations/``, a string literal whose whole value is a job or step state ("queued",
"running", "waiting", "succeeded", "failed", "blocked", "unknown", "cancelled", "completed")
is flagged: it must be ``JobState.X`` or ``StepState.X`` (``.value`` where a plain ``str``
is needed). Not flagged:

- docstrings;
- the literal pieces of an f-string, and any longer string that merely contains a state
  word: messages, and SQL text (which spells states inside its statements);
- a literal on a line that carries the comment ``# not a state``: a word that happens to
  spell a state but means something else (a verb in a message).
"""

from __future__ import annotations

import ast
from pathlib import Path

from django_jobs.states import JobState, StepState

PACKAGE = Path(__file__).resolve().parents[2] / "django_jobs"
STATE_VALUES = frozenset(JobState.values) | frozenset(StepState.values)
MARKER = "# not a state"


def bare_states(source: str) -> list[tuple[int, str]]:
    """(line, value) of each state literal in ``source`` that the rule flags."""
    tree = ast.parse(source)
    lines = source.splitlines()
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                exempt.add(id(first.value))
        elif isinstance(node, ast.JoinedStr):
            exempt.update(id(part) for part in node.values)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in STATE_VALUES
        and id(node) not in exempt
        and MARKER not in lines[node.lineno - 1]
    )


def modules() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "states.py" and "migrations" not in path.relative_to(PACKAGE).parts
    ]


def test_the_rule_flags_states_and_only_states():
    source = '''
"""A docstring that says failed."""
def f(job, rows):
    """running"""
    job.state = "queued"
    done = rows.filter(state__in=("succeeded", 'cancelled'))
    log(f"failed {job}", "the job failed", "Waiting")
    step = {"completed": 1}
    verb = "cancelled"  # not a state: a verb
    return job.state == "unknown"
'''
    assert bare_states(source) == [
        (5, "queued"),
        (6, "cancelled"),
        (6, "succeeded"),
        (8, "completed"),
        (10, "unknown"),
    ]


def test_the_scan_reads_the_package():
    names = {path.relative_to(PACKAGE).as_posix() for path in modules()}
    assert {"models.py", "operations.py", "engine/run/executor.py", "store/base/claims.py"} <= names
    assert not {n for n in names if n == "states.py" or n.startswith("migrations/")}


def test_no_bare_state_string_in_the_package():
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {value!r}"
        for path in modules()
        for line, value in bare_states(path.read_text())
    ]
    assert found == [], (
        "Name these states by their constants (django_jobs.states.JobState / StepState):\n"
        + "\n".join(found)
    )
