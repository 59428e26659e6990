"""Settings of the benchmark: the test project's, plus the ``bench`` app, as a user installs it.

``DATABASE_URL`` must point at PostgreSQL (``bench/run.py`` sets it to its own database).
The database options are Django's defaults: the test project's ``prepare_threshold`` is a
user's tuning (server-side prepared statements for every query), and the benchmark measures
what a user gets without it.
"""

from __future__ import annotations

from testproject.settings import *  # noqa: F403
from testproject.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]

DATABASES = {"default": {**DATABASES["default"], "OPTIONS": {}}}

# As in production: no query log on every cursor (DEBUG keeps each SQL string in memory).
DEBUG = False
