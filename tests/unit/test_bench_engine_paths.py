"""The engine's modules the benchmark reaches into (``bench/engine_paths.py``): today's path
first, the one before the move in an engine that has nothing there."""

from __future__ import annotations

import pytest

from bench import engine_paths
from bench.engine_paths import FORMER, engine_module, engine_name


@pytest.mark.parametrize("path", FORMER)
def test_each_path_of_today_is_the_working_trees_module(path):
    assert engine_module(path).__name__ == path


def test_an_engine_with_nothing_at_todays_path_gives_the_former_one(monkeypatch):
    monkeypatch.setitem(
        engine_paths.FORMER, "django_jobs.engine.nowhere.worker", "django_jobs.engine.worker.worker"
    )
    found = engine_module("django_jobs.engine.nowhere.worker")
    assert found.__name__ == "django_jobs.engine.worker.worker"
    assert callable(engine_name("django_jobs.engine.nowhere.worker", "Worker"))


def test_a_path_with_no_former_one_or_a_name_not_there_raises_as_an_import_does():
    with pytest.raises(ModuleNotFoundError):
        engine_module("django_jobs.engine.nowhere")
    with pytest.raises(ImportError, match="cannot import name 'Nothing'"):
        engine_name("django_jobs.engine.run.context", "Nothing")


def test_a_module_that_is_there_but_fails_its_own_import_is_not_sent_on(tmp_path, monkeypatch):
    (tmp_path / "bench_paths_probe").mkdir()
    (tmp_path / "bench_paths_probe" / "__init__.py").write_text("")
    (tmp_path / "bench_paths_probe" / "broken.py").write_text("import bench_paths_not_there\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(engine_paths.FORMER, "bench_paths_probe.broken", "bench.report")
    with pytest.raises(ModuleNotFoundError, match="bench_paths_not_there"):
        engine_module("bench_paths_probe.broken")
