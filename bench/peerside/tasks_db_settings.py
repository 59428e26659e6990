"""A minimal Django project for Django's Tasks database backend (``django_tasks_db``), as its
documentation installs it: default ``DATABASES`` options, the backend as the default."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

_url = urlparse(os.environ["TASKS_DB_URL"])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(_url.path.lstrip("/")),
        "USER": unquote(_url.username or "postgres"),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
    }
}
INSTALLED_APPS = ["django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
USE_TZ = True
DEBUG = False
SECRET_KEY = "bench"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
