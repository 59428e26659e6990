"""Settings of the demo (``scripts/demo``): the test project's, without the test suite's kinds.

The ``testproject`` app is left out, so its ``jobs.py`` (the test kinds) is never loaded: the
demo's registry, and so its admin's kind filter, holds the demo's kinds
(``testproject/demo/jobs.py``) and the ``django.tasks`` kind only (the built-in
``django_jobs.flow`` once there are flows), and its engine filter the one engine.
"""

from __future__ import annotations

from .settings import *  # noqa: F403
from .settings import INSTALLED_APPS, JOBS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in ("testproject", "testproject.shop")]
# The test suite's second engine ("fleet") is not the demo's: its engine filter lists "default".
JOBS = {**JOBS, "ENGINES": {"default": JOBS["ENGINES"]["default"]}}
