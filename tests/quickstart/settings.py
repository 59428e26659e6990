"""A fresh project with only the README's quick-start lines (SPEC §2): no REST_FRAMEWORK, no
EVENTSTREAM_* setting. The rest is what ``django-admin startproject`` writes, the test
database, and ``CHANNEL_LAYERS`` for the WebSocket (as for any Channels app).

``tests/integration/test_quickstart.py`` serves it with daphne and checks that the API's
schema, SSE with ``Last-Event-ID`` replay and the WebSocket all work.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

# --- startproject's boilerplate -------------------------------------------------------------
# The test process's secret key: the sessions it makes are read here.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-jobs-demo-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.quickstart.urls"
STATIC_URL = "static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _database() -> dict[str, object]:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["SQLITE_PATH"]}
    parsed = urlparse(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or "postgres"),
        "HOST": parsed.hostname or "127.0.0.1",
        "PORT": str(parsed.port or 5432),
    }


DATABASES = {"default": _database()}

# --- the README's quick start ---------------------------------------------------------------
INSTALLED_APPS = [
    "daphne",  # first: runserver serves ASGI
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_eventstream",
    "channels",
    "django_jobs",
]
JOBS = {  # every key is optional; see docs/configuration.md
    "ENGINES": {"default": {"concurrency": 4}},
    "LEASE": "30s",
}

# --- serving the WebSocket (README: "Live events") ------------------------------------------
ASGI_APPLICATION = "tests.quickstart.asgi.application"
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
