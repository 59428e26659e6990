"""The engine's modules that the benchmark imports or patches, found in either layout.

The harness (``bench/``, ``testproject/``, ``manage.py``) is the working tree's on both sides
of ``python -m bench --against REV`` (``bench/against.py``): only the engine differs, and a
revision from before the engine's rooms by concern (worker, run, rows, observe) keeps these
modules one floor up, ``django_jobs.engine.worker`` for ``django_jobs.engine.worker.worker``.
The benchmark names each by its path today; ``engine_module`` imports that path, or, in an
engine that has no such module, the path it had before the move.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

#: Each engine module the benchmark reaches into, by its path today -> its path before it moved.
FORMER: dict[str, str] = {
    "django_jobs.engine.worker.worker": "django_jobs.engine.worker",
    "django_jobs.engine.run.context": "django_jobs.engine.context",
    "django_jobs.engine.run.executor": "django_jobs.engine.executor",
    "django_jobs.engine.rows.admission": "django_jobs.engine.admission",
    "django_jobs.engine.rows.publish": "django_jobs.engine.publish",
    "django_jobs.engine.observe.tracing": "django_jobs.engine.tracing",
}


def engine_module(path: str) -> ModuleType:
    """The module at ``path`` (today's layout), or at its ``FORMER`` path in an engine that has
    nothing at ``path``. A module that is there but fails to import (one of its own imports
    missing) raises as it is: only the path itself being absent sends the look-up on."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as missing:
        former = FORMER.get(path)
        absent = missing.name is not None and (
            path == missing.name or path.startswith(f"{missing.name}.")
        )
        if former is None or not absent:
            raise
    return importlib.import_module(former)


def engine_name(path: str, name: str) -> Any:
    """``from path import name``, through ``engine_module``: an ``ImportError`` when the
    module has no such name, as the statement raises."""
    module = engine_module(path)
    try:
        return getattr(module, name)
    except AttributeError:
        raise ImportError(
            f"cannot import name {name!r} from {module.__name__!r}", name=module.__name__
        ) from None
