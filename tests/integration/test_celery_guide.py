"""The Celery migration guide's claims, tested: every ```python block of
docs/migrating-from-celery.md runs as written (each asserts what it shows), and the page states
the default retry policy that the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from django_jobs import Retry
from django_jobs.engine.schedules import declared, undeclare
from django_jobs.kinds.registry import all_handles, unregister

PAGE = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-celery.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def title(block: str) -> str:
    heading = None
    for line in PAGE.read_text()[: PAGE.read_text().index(block)].splitlines():
        if line.startswith("## "):
            heading = line[3:]
    return heading or "top"


#: The section whose blocks are one project's files and the calls that import them: run in
#: order, as one page, by tests/docs/test_doc_blocks.py (a block headed ``# shop/tasks.py`` is
#: that module), not one by one here.
ONE_IMPORT = "One import: `django_jobs.celery`"


def cases():
    for index, block in enumerate(BLOCKS):
        if title(block) != ONE_IMPORT:
            yield pytest.param(block, id=f"{index}-{title(block)}")


def test_the_one_import_section_is_an_app_of_at_least_15_celery_tasks():
    blocks = [block for block in BLOCKS if title(block) == ONE_IMPORT]
    tasks = re.findall(r"^@shared_task\b", "".join(blocks), re.M)
    assert len(tasks) >= 15
    assert (
        blocks[0].startswith("# proj/celery.py") and "from django_jobs.celery import" in blocks[1]
    )
    for used in (
        "bind=True",
        "self.retry(",
        "max_retries=",
        "autoretry_for=",
        "retry_backoff=",
        "default_retry_delay=",
        "soft_time_limit=",
        "time_limit=",
        "queue=",
        "expires=",
        "ignore_result=True",
        "base=",
        ".delay(",
        ".apply_async(",
        "chain(",
        "group(",
        "chord(",
        "beat_schedule",
    ):
        assert used in "".join(blocks), used


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
    assert '`JOBS["DEFAULT_RETRY"] = Retry(attempts=1)`' in text


def test_the_page_uses_call_where_celery_runs_every_call_and_says_what_payload_coalesces():
    """Each example keyed "payload" coalesces on purpose, and the page says what it coalesces:
    a job still queued or already running. Left as "payload": the one that shows coalescing."""
    text = PAGE.read_text()
    assert re.search(r"\*\*queued or\s+already running\*\*", text)
    keyed = [block for block in BLOCKS if 'idempotency_key="payload"' in block]
    assert len(keyed) <= 1, 'a Celery task runs every call: key its port "call"'
    assert sum('idempotency_key="call"' in block for block in BLOCKS) >= 20


#: What SPEC §14 asks the guide's table to map, each with a row (and its section an example).
CELERY_FEATURES = [
    "soft_time_limit",
    "time_limit",
    "ignore_result",
    "default_retry_delay",
    "max_retries",
    "MaxRetriesExceededError",
    "autoretry_for",
    "retry_backoff",
    "retry_jitter",
    "compression",
    "CELERY_TIMEZONE",
    "custom beat schedule class",
    "a flow's queue",
    "worker_concurrency",
    "worker_max_tasks_per_child",
    "worker_max_memory_per_child",
    "inspect",
    "cancel_consumer",
    # And what a Celery team reaches for besides, where the answer differs.
    "terminate=True",
    "purge",
    "task_reject_on_worker_lost",
    "worker_prefetch_multiplier",
    "autoscale",
    # And what porting a real Celery codebase met, where a literal port meant something else.
    "runs once unless",  # Celery's default: JOBS["DEFAULT_RETRY"]
    "the only retry",  # bind=True with self.retry alone: Retry(on=RetryLater)
    "retry_kwargs",
    "two `max_retries`",
    "except MaxRetriesExceededError",
    "task-level",  # @app.task(expires=)
    "throws=",
    "queue=None",
    "headers=",
]


def table_rows() -> list[str]:
    text = PAGE.read_text()
    table = text[text.index("## The table") : text.index("\n## ", text.index("## The table") + 1)]
    return [line for line in table.splitlines() if line.startswith("| ")]


@pytest.mark.parametrize("feature", CELERY_FEATURES)
def test_the_table_has_a_row_for_each_celery_feature_with_a_link_to_its_example(feature):
    rows = [row for row in table_rows() if feature in row.split(" | ")[0]]
    assert rows, f"no row of the table names {feature!r} in its Celery column"
    anchors = {
        re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^###? (.+)$", PAGE.read_text(), re.M)
    }
    for row in rows:
        for anchor in re.findall(r"\]\(#([^)]+)\)", row):
            assert anchor in anchors, f"the row for {feature!r} links to #{anchor}, not a heading"
