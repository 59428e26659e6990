"""The kinds' doors to the engine: installed by ``JobsConfig.ready()``, and loud when not."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_jobs.engine.rows.admission import admit
from django_jobs.engine.run.inline import run_inline
from django_jobs.kinds import doors


def test_ready_installed_the_engines_admission_and_inline_run():
    assert doors._admit is admit
    assert doors._run_inline is run_inline


def test_a_door_not_yet_installed_names_the_setup_to_do(monkeypatch):
    monkeypatch.setattr(doors, "_admit", None)
    monkeypatch.setattr(doors, "_run_inline", None)
    with pytest.raises(ImproperlyConfigured, match=r"INSTALLED_APPS.*django\.setup\(\)"):
        doors.admit(object(), [{}])
    with pytest.raises(ImproperlyConfigured, match=r"INSTALLED_APPS.*django\.setup\(\)"):
        doors.run_inline(object(), {})
