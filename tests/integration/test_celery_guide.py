"""The Celery migration guide's claims, tested: every ```python block of
docs/migrating-from-celery.md runs as written (each asserts what it shows), and the page states
the default retry policy that the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from django_jobs import Retry
from django_jobs.engine.schedules import declared, undeclare
from django_jobs.registry import all_handles, unregister

PAGE = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-celery.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def title(block: str) -> str:
    heading = None
    for line in PAGE.read_text()[: PAGE.read_text().index(block)].splitlines():
        if line.startswith("## "):
            heading = line[3:]
    return heading or "top"


def cases():
    for index, block in enumerate(BLOCKS):
        yield pytest.param(block, id=f"{index}-{title(block)}")


@pytest.fixture
def clean_guide():
    yield
    for handle in all_handles():
        if handle.kind.startswith("celery_guide."):
            unregister(handle.kind)
    for declared_schedule in declared():
        if declared_schedule.name.startswith("celery_guide."):
            undeclare(declared_schedule.name)


def test_the_page_has_its_examples():
    assert len(BLOCKS) >= 12
    assert "celery_guide." in "".join(BLOCKS)


@pytest.mark.django_db
@pytest.mark.parametrize("block", list(cases()))
def test_each_example_runs_as_written(block, clean_guide):
    exec(compile(block, f"{PAGE.name} block", "exec"), {"__name__": "celery_guide_example"})


def test_the_page_states_the_default_retry_policy():
    text = PAGE.read_text()
    assert Retry().attempts == 3
    assert "**3 attempts**" in text and "`retry=Retry(attempts=1)`" in text
