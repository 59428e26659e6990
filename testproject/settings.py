"""Settings of the demo and test project.

SQLite by default (a file beside the project, or ``SQLITE_PATH``); PostgreSQL when
``DATABASE_URL=postgres://user@host:port/name`` is set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"


def local_secret_key(path: Path) -> str:
    """This checkout's own secret key: made once, kept in ``path`` (readable by its owner only).

    Every process of the project (web server, workers) reads the same file, so sessions survive
    a restart and work across processes.
    """
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        from django.core.management.utils import get_random_secret_key

        key = get_random_secret_key()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return path.read_text().strip()
        with os.fdopen(fd, "w") as file:
            file.write(key + "\n")
        return key


# DJANGO_SECRET_KEY wins. Otherwise, with DEBUG on (the demo, the tests) a fixed key that is
# public, so known to be insecure; with DEBUG off, where `check --deploy` warns of that key
# (django_jobs.W010), a key of this checkout's own (DJANGO_SECRET_KEY_FILE, default .secret_key
# beside manage.py).
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or (
    "django-jobs-demo-not-secret"
    if DEBUG
    else local_secret_key(Path(os.environ.get("DJANGO_SECRET_KEY_FILE", BASE_DIR / ".secret_key")))
)
ALLOWED_HOSTS = ["*"]

# daphne's app only makes `runserver` serve ASGI (the demo's live page). It imports Twisted,
# a quarter of the start-up of any other command, and the test suite starts hundreds of
# workers: so it is loaded for runserver alone. A project of your own lists it first always,
# as docs/getting-started.md shows.
SERVES_ASGI = sys.argv[1:2] == ["runserver"]
INSTALLED_APPS = [
    *(["daphne"] if SERVES_ASGI else []),
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_eventstream",
    "channels",
    "django_jobs",
    "testproject.demo",  # the demo's kinds
    "testproject",  # the test suite's kinds (jobs.py) and models; the demo leaves it out
    "testproject.shop",  # Celery-shaped tasks (tasks.py), found by app.autodiscover_tasks()
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
ASGI_APPLICATION = "testproject.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The project's templates, also for the demo, which leaves the testproject app out.
        "DIRS": [BASE_DIR / "testproject" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_from_env() -> dict[str, object]:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SQLITE_PATH", str(BASE_DIR / "demo.sqlite3")),
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": os.environ.get("SQLITE_TEST_PATH") or None},
        }
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be postgres://...; got scheme {parsed.scheme!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or "postgres"),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "127.0.0.1",
        "PORT": str(parsed.port or 5432),
        "OPTIONS": {"prepare_threshold": 5},
    }


DATABASES = {"default": database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
LOGIN_URL = "/admin/login/"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
}

CHANNEL_LAYERS: dict[str, Any] = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

JOBS = {
    "ENGINES": {"default": {"concurrency": 4}, "fleet": {"concurrency": 2}},
    "LEASE": os.environ.get("JOBS_LEASE", "30s"),
}
# --- the hard time limit's grace for a process's other jobs: the tests set a short one ---
if os.environ.get("JOBS_KILL_GRACE"):
    JOBS["KILL_GRACE"] = os.environ["JOBS_KILL_GRACE"]
# --- members' submit rate: a live-server test sets its own (docs/security.md) ---
if os.environ.get("JOBS_MEMBER_RATE"):
    JOBS["MEMBER_RATE"] = os.environ["JOBS_MEMBER_RATE"]

# JOBS_TEST_NO_LOGGING=1: no LOGGING setting, as a new project has (runjobs' own text lines,
# tests/integration/test_worker_logging.py).
LOGGING = (
    {}
    if os.environ.get("JOBS_TEST_NO_LOGGING")
    else {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"console": {"class": "logging.StreamHandler"}},
        "loggers": {
            "django_jobs": {
                "handlers": ["console"],
                # JOBS_LOG_LEVEL=INFO: what the scheduler fired, in worker process tests.
                "level": os.environ.get("JOBS_LOG_LEVEL", "WARNING"),
            }
        },
    }
)

# --- Django's Tasks framework (django.tasks on Django 6, the django-tasks backport on 5.2) ---
# (owned by the tasks backend; see docs/tasks.md)
import django  # noqa: E402 - kept inside this block

TASKS = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend"}}
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport's system checks and signal handlers

# --- worker process tests: a poll interval from the environment (the NOTIFY wake-up test) ---
if os.environ.get("JOBS_POLL_INTERVAL"):
    JOBS["POLL_INTERVAL"] = os.environ["JOBS_POLL_INTERVAL"]

# --- live-server tests that send many requests (the API fuzz): psycopg's connection pool, as
# docs/getting-started.md configures PostgreSQL, rather than a new connection per request ---
_default_db: dict[str, Any] = DATABASES["default"]
if os.environ.get("DATABASE_POOL") == "1" and str(_default_db["ENGINE"]).endswith("postgresql"):
    _default_db["OPTIONS"] = {**_default_db["OPTIONS"], "pool": True}

# --- behind PgBouncer in transaction mode (before 1.21): either setting docs/configuration.md
# asks for, on Django's default OPTIONS (a numeric prepare_threshold, like the one above, has
# psycopg prepare statements of its own) ---
_transaction_pool = os.environ.get("DATABASE_TRANSACTION_POOL")
if _transaction_pool == "disable_server_side_cursors":
    DATABASES["default"]["OPTIONS"] = {}
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
elif _transaction_pool == "django_defaults":  # neither: the engine prepares its statements
    DATABASES["default"]["OPTIONS"] = {}
elif _transaction_pool == "prepare_threshold_none":
    DATABASES["default"]["OPTIONS"] = {"prepare_threshold": None}

# --- live job events: SSE and WebSocket (Channels); docs/events.md ---
# (owned by the live events; the relay needs nothing more than the database)
# The job streams need no EVENTSTREAM_* setting (tests/quickstart has none). These two are
# what earlier versions asked for: kept so that the tests show such a project keeps working.
EVENTSTREAM_CHANNELMANAGER_CLASS = "django_jobs.events.sse.JobsChannelManager"
EVENTSTREAM_STORAGE_CLASS = "django_jobs.events.sse.JobEventStorage"
# The fleet option, through Redis: JOBS_EVENTS_REDIS=redis://host:port/db (the Redis tests).
if os.environ.get("JOBS_EVENTS_REDIS"):
    _events_redis = urlparse(os.environ["JOBS_EVENTS_REDIS"])
    from redis.exceptions import ConnectionError as RedisConnectionError

    # Reconnect once on a dropped connection (pooled connections are stale after a Redis
    # restart), and read longer than channels-redis's 5 s blocking pop (redis-py 8 defaults
    # to a 5 s socket timeout).
    _events_redis_resilience: dict[str, Any] = {
        "retry_on_error": [RedisConnectionError],
        "socket_timeout": 15,
    }
    EVENTSTREAM_REDIS: dict[str, Any] = {
        "host": _events_redis.hostname or "127.0.0.1",
        "port": _events_redis.port or 6379,
        "db": int(_events_redis.path.lstrip("/") or 0),
        "socket_connect_timeout": 1,
        **_events_redis_resilience,
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": os.environ["JOBS_EVENTS_REDIS"], **_events_redis_resilience}],
                "prefix": os.environ.get("JOBS_EVENTS_REDIS_PREFIX", "asgi"),
            },
        }
    }
