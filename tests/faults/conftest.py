"""Fault tests: the long (soak) versions of the loops run only when asked for.

``pytest -m soak`` (or ``JOBS_SOAK=1 pytest tests/faults``) runs them; otherwise they are
skipped, so the normal suite runs only the short versions.
"""

from __future__ import annotations

import os

import pytest


def soak_selected(config: pytest.Config) -> bool:
    return os.environ.get("JOBS_SOAK") == "1" or "soak" in (config.option.markexpr or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if soak_selected(config):
        return
    skip = pytest.mark.skip(reason="a soak run: select it with -m soak (or JOBS_SOAK=1)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
