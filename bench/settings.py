"""Settings of the benchmark: the test project's, plus the ``bench`` app and production-like knobs.

``DATABASE_URL`` must point at PostgreSQL (``bench/run.py`` sets it to its own database).
"""

from __future__ import annotations

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]

# As in production: no query log on every cursor (DEBUG keeps each SQL string in memory).
DEBUG = False
