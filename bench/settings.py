"""Settings of the benchmark: the test project's, plus the ``bench`` app, as a user installs it.

``DATABASE_URL`` must point at PostgreSQL (``bench/run.py`` sets it to its own database).
The database options are Django's defaults: the test project's ``prepare_threshold`` is a
user's tuning (server-side prepared statements for every query), and the benchmark measures
what a user gets without it.
"""

from __future__ import annotations

import os

from django.core.management.utils import get_random_secret_key

from testproject.settings import *  # noqa: F403
from testproject.settings import DATABASES, INSTALLED_APPS

# The test suite's kinds (testproject's jobs.py) and the shop's Celery-shaped tasks are the
# tests', not the benchmark's: left out, so an engine from before the options they use
# (``--against``) runs these settings too. The benchmark's kinds are bench/jobs.py's.
_TESTS_ONLY = {"testproject", "testproject.shop"}
INSTALLED_APPS = [*(app for app in INSTALLED_APPS if app not in _TESTS_ONLY), "bench"]

DATABASES = {"default": {**DATABASES["default"], "OPTIONS": {}}}

# As in production: no query log on every cursor (DEBUG keeps each SQL string in memory).
DEBUG = False
# With DEBUG off, check --deploy (django_jobs.W010) warns of the public key. The benchmark signs
# nothing that outlives a process, so each process may have its own.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or get_random_secret_key()
