from __future__ import annotations

import pytest
from django.test import override_settings

from django_jobs.checks import check_jobs_settings


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
