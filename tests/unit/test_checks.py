from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks
from django.core.management import call_command, load_command_class
from django.core.management.base import ALL_CHECKS, SystemCheckError
from django.test import override_settings

from django_jobs.checks import check_jobs_settings, check_test_clock
from tests.conftest import ROOT


def ids(**jobs):
    with override_settings(JOBS=jobs):
        return sorted({e.id for e in check_jobs_settings()})


def test_default_settings_pass():
    with override_settings(JOBS={}):
        assert check_jobs_settings() == []


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ({"NOPE": 1}, "django_jobs.E001"),
        ({"DATABASE": "missing"}, "django_jobs.E002"),
        ({"OUTBOX": "sometimes"}, "django_jobs.E003"),
        ({"LEASE": "forever"}, "django_jobs.E004"),
        ({"RETENTION": "a while"}, "django_jobs.E004"),
        ({"KILL_GRACE": "a moment"}, "django_jobs.E004"),
        ({"IS_OPERATOR": "no.such.module.func"}, "django_jobs.E005"),
        ({"ENGINES": {"default": {"concurrency": 0}}}, "django_jobs.E006"),
        ({"CAPS": {"global": -1}}, "django_jobs.E007"),
        ({"LOG_TAIL": "many"}, "django_jobs.E008"),
        ({"RATES": {"mail": "lots"}}, "django_jobs.E009"),
    ],
)
def test_configuration_mistakes_are_system_checks(jobs, expected):
    assert expected in ids(**jobs)


def test_messages_say_what_to_do():
    with override_settings(JOBS={"DATABASE": "missing"}):
        [error] = check_jobs_settings()
    assert "DATABASES" in error.msg and error.hint


# --- a known, public SECRET_KEY with DEBUG off ---------------------------------------------

DEMO_KEY = "django-jobs-demo-not-secret"  # testproject/settings.py, public in this repository
STARTPROJECT_KEY = "django-insecure-4^k2@x9#(m3z!q8w7e6r5t4y3u2i1o0p-=+abcdefghijklmn"
RANDOM_KEY = "s3Hk9vQ2xL7pW4mZ8rT1yB6nC0dF5gJ3aE9uI2oK7hV4bN8cX1zR6tY0wM5qS2"


def secret_key_errors(**overrides):
    from django_jobs.checks import check_secret_key

    with override_settings(**overrides):
        return check_secret_key()


@pytest.mark.parametrize("key", [DEMO_KEY, STARTPROJECT_KEY])
def test_a_known_insecure_secret_key_is_a_deploy_warning_when_debug_is_off(key):
    [error] = secret_key_errors(DEBUG=False, SECRET_KEY=key)
    assert error.id == "django_jobs.W010"
    assert error.level == checks.WARNING
    assert "SECRET_KEY" in error.msg and "get_random_secret_key" in error.hint
    assert key not in error.msg + error.hint  # never echo the key


@pytest.mark.parametrize("key", [DEMO_KEY, STARTPROJECT_KEY])
def test_a_known_insecure_secret_key_is_fine_while_debug_is_on(key):
    assert secret_key_errors(DEBUG=True, SECRET_KEY=key) == []


def test_a_random_secret_key_passes_with_debug_off():
    assert secret_key_errors(DEBUG=False, SECRET_KEY=RANDOM_KEY) == []


def test_a_known_insecure_fallback_key_is_warned_about_too():
    # Django still accepts signatures made with a fallback key: a public one lets anyone sign.
    [error] = secret_key_errors(
        DEBUG=False, SECRET_KEY=RANDOM_KEY, SECRET_KEY_FALLBACKS=[RANDOM_KEY[::-1], DEMO_KEY]
    )
    assert error.id == "django_jobs.W010" and "SECRET_KEY_FALLBACKS" in error.msg


def manage_check(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_"))}
    base.update(
        DJANGO_SETTINGS_MODULE="testproject.settings",
        SQLITE_PATH=str(tmp_path / "check.sqlite3"),
        DJANGO_SECRET_KEY_FILE=str(tmp_path / "secret_key"),
        **env,
    )
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check", *flags],
        env={k: v for k, v in base.items() if v != ""},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_the_test_project_refuses_its_public_key_with_debug_off(tmp_path):
    deploy = ("--deploy", "--fail-level", "WARNING")
    done = manage_check(tmp_path, *deploy, DJANGO_DEBUG="0", DJANGO_SECRET_KEY=DEMO_KEY)
    assert done.returncode != 0
    assert "django_jobs.W010" in done.stderr


def test_the_public_key_check_is_for_deploys_only():
    """Like Django's own security checks, W010 runs under ``check --deploy`` only: the test
    runner turns DEBUG off, and a new project's ``manage.py test`` runs with the
    ``django-insecure-`` key that ``startproject`` wrote."""
    with override_settings(DEBUG=False, SECRET_KEY=STARTPROJECT_KEY):
        security = [checks.Tags.security]
        assert "django_jobs.W010" not in {m.id for m in checks.run_checks(tags=security)}
        deploy = checks.run_checks(tags=security, include_deployment_checks=True)
        assert "django_jobs.W010" in {m.id for m in deploy}
        assert all(m.level < checks.ERROR for m in deploy if m.id.startswith("django_jobs.W"))


def test_the_test_project_makes_its_own_key_with_debug_off(tmp_path):
    first = manage_check(tmp_path, DJANGO_DEBUG="0")
    assert first.returncode == 0, first.stderr
    key = (tmp_path / "secret_key").read_text().strip()
    assert len(key) >= 50 and key != DEMO_KEY and not key.startswith("django-insecure-")
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0  # readable by its owner only
    again = manage_check(tmp_path, DJANGO_DEBUG="0")  # the next process reads the same key
    assert again.returncode == 0 and (tmp_path / "secret_key").read_text().strip() == key
    assert manage_check(tmp_path).returncode == 0  # DEBUG on (the default): the demo's key


# --- the file-driven test clock (DJANGO_JOBS_TEST_CLOCK) ----------------------------------------


@pytest.fixture
def clock_file(tmp_path, monkeypatch):
    """The clock file named by DJANGO_JOBS_TEST_CLOCK in this process, and the real clock
    back afterwards whatever the test did (the variable is read once, at import)."""
    from django_jobs import clock

    path = tmp_path / "clock"
    monkeypatch.setenv(clock.TEST_CLOCK_ENV, str(path))
    clock.read_environment()
    yield path
    monkeypatch.delenv(clock.TEST_CLOCK_ENV, raising=False)
    clock.read_environment()


def test_the_test_clock_reads_the_file_while_debug_is_on(clock_file, monkeypatch):
    from datetime import UTC, datetime, timedelta

    from django_jobs import clock

    instant = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    clock.set_file(clock_file, instant)
    with override_settings(DEBUG=True):
        assert clock.now() == instant
        clock.set_file(clock_file, instant + timedelta(minutes=1))
        assert clock.now() == instant + timedelta(minutes=1)
        assert check_test_clock() == []
    monkeypatch.delenv(clock.TEST_CLOCK_ENV)
    clock.read_environment()
    assert abs(clock.now() - datetime.now(UTC)) < timedelta(minutes=1)  # off: the real clock


def test_the_test_clock_is_refused_with_debug_off(clock_file):
    from django.core.exceptions import ImproperlyConfigured

    from django_jobs import clock

    clock_file.write_text("2026-06-01T12:00:30+00:00")
    with override_settings(DEBUG=False):
        with pytest.raises(ImproperlyConfigured, match="DEBUG is off"):
            clock.now()
        [error] = check_test_clock()
    assert error.id == "django_jobs.E011" and error.level == checks.ERROR


def test_the_test_clock_stops_every_command_with_debug_off(tmp_path):
    path = tmp_path / "clock"
    path.write_text("2026-06-01T12:00:30+00:00")
    done = manage_check(
        tmp_path, DJANGO_DEBUG="0", DJANGO_SECRET_KEY=RANDOM_KEY, DJANGO_JOBS_TEST_CLOCK=str(path)
    )
    assert done.returncode != 0
    assert "django_jobs.E011" in done.stderr


# -- the checks runjobs and jobs run as they start ---------------------------------------------


def command_check(name: str = "runjobs") -> None:
    """The checks ``manage.py NAME`` runs before it starts (``requires_system_checks``)."""
    command = load_command_class("django_jobs", name)
    if command.requires_system_checks == ALL_CHECKS:  # as BaseCommand.execute decides
        command.check()
    else:
        command.check(tags=command.requires_system_checks)


@pytest.mark.django_db  # Django's model checks ask the database's features
def test_runjobs_runs_the_jobs_checks_and_stops_on_their_errors():
    with override_settings(JOBS={"LEASE": "forever"}):
        with pytest.raises(SystemCheckError, match=r"django_jobs\.E004"):
            command_check()
    # Tagged, so `manage.py check --tag django_jobs` runs them alone as well.
    with override_settings(JOBS={"LEASE": "forever"}):
        found = checks.run_checks(tags=["django_jobs"])
    assert "django_jobs.E004" in {m.id for m in found}


@pytest.mark.django_db  # Django's model checks ask the database's features
@pytest.mark.parametrize("name", ["runjobs", "jobs"])
def test_the_commands_leave_the_web_checks_to_the_web_process(name):
    # `manage.py check` loads the project's URLconf (Django's urls checks), here one that
    # cannot be imported; a worker serves no URL and does not load it, or its views.
    with override_settings(ROOT_URLCONF="tests.unit.no_such_urlconf"):
        with pytest.raises(ModuleNotFoundError, match="no_such_urlconf"):
            call_command("check")
        command_check(name)
