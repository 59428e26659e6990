"""A Celery Django project's ``celery.py`` and ``tasks.py`` as large codebases write them:
``Celery("proj", task_cls=...)`` whose base's own ``__call__`` wraps each run in the worker,
``autodiscover_tasks(packages, related_name)``, ``imports``, ``on_after_configure`` with
``add_periodic_task``, ``celery.schedules``, ``celery.utils.log`` and ``celery.signals``; and
``AsyncResult.result`` while a task retries and after it failed with its own exception type,
each as Celery's source gives it (celery/app/base.py, trace.py, task.py, backends/base.py)."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from django_jobs.celery import Celery, Task, crontab, names, shared_task, states
from django_jobs.celery.app import _pending, discover_pending
from django_jobs.celery.beat import declare
from django_jobs.engine.schedules import declared, undeclare
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.shop import tasks

pytestmark = pytest.mark.django_db

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
seen: list[tuple[str, object]] = []


class Guarded(Task):
    """A project's base task class (Celery(task_cls=...)) whose __call__ wraps every run."""

    def __call__(self, *args, **kwargs):
        seen.append(("guard", self.request.id))
        return super().__call__(*args, **kwargs)


class GatewayDown(Exception):
    """An exception type of the task's own module (not a builtin, not Celery's)."""


@pytest.fixture
def project_tasks():
    """Two tasks of the project, registered for the test and unregistered after: a kind
    defined at import would be in every other test's registry (the kinds the CLI lists)."""

    @shared_task(name="project.flaky", autoretry_for=(GatewayDown,), max_retries=2)
    def flaky(order):
        seen.append(("flaky", order))
        raise GatewayDown(f"gateway down for {order}")

    @shared_task(name="project.again", bind=True, max_retries=1, default_retry_delay=5)
    def again(self):
        seen.append(("again", self.request.retries))
        raise self.retry()

    yield flaky, again
    unregister("project.flaky")
    unregister("project.again")


@pytest.fixture(autouse=True)
def clean():
    seen.clear()
    yield
    seen.clear()


@pytest.fixture
def app():
    made = Celery("project", task_cls=f"{__name__}:Guarded")
    yield made
    names.apps.remove(made)


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


# -- task_cls and a base's own __call__ ---------------------------------------------------------


def test_task_cls_is_the_base_of_app_task_and_its_call_wraps_the_run_in_the_workers_request(app):
    @app.task(bind=True, name="project.guarded")
    def guarded(self, x):
        seen.append(("body", self.request.id))
        return x * 2

    try:
        assert isinstance(guarded, Guarded) and app.Task is Guarded
        result = guarded.delay(21)
        run_until_idle()
        assert result.get(timeout=1) == 42
        # The worker called the base's __call__ (Celery's trace does when a class defines one),
        # and super().__call__ ran the body once, in the worker's request (not a direct call's).
        assert seen == [("guard", result.id), ("body", result.id)]
    finally:
        unregister("project.guarded")


def test_a_direct_call_inside_a_worker_run_still_pushes_its_own_request(app):
    @app.task(bind=True, name="project.inner")
    def inner(self):
        seen.append(("inner", self.request.called_directly))

    @app.task(name="project.outer")
    def outer():
        inner()  # another task called as a function: its own request, called directly

    try:
        outer.delay()
        run_until_idle()
        assert ("inner", True) in seen
        assert next(entry for entry in seen if entry[0] == "guard")[1] is not None
    finally:
        unregister("project.inner")
        unregister("project.outer")


def test_celery_parts_that_replace_its_machinery_are_refused_at_the_app():
    with pytest.raises(NotImplementedError, match="loader"):
        Celery("proj", loader="proj.loaders:Loader")
    made = Celery("proj", broker="redis://x", include=["json.tool"], task_default_queue="q")
    try:
        assert made.conf.broker_url == "redis://x" and made.conf.task_default_queue == "q"
    finally:
        names.apps.remove(made)


# -- autodiscover_tasks(packages, related_name), imports ----------------------------------------


def test_autodiscover_tasks_imports_each_packages_related_module_and_passes_over_the_rest():
    made = Celery("discover")
    try:
        sys.modules.pop("json.tool", None)
        made.autodiscover_tasks(packages=lambda: ["json", "email"], related_name="tool")
        assert "json.tool" in sys.modules  # email has no tool module: passed over, as Celery
        sys.modules.pop("json.tool", None)
        _pending.append(("tool", ["json"]))  # asked before Django was ready
        discover_pending()
        assert "json.tool" in sys.modules
    finally:
        names.apps.remove(made)


def test_the_imports_setting_is_imported_when_django_is_ready():
    made = Celery("imports")
    made.conf.imports = ["json.tool"]
    try:
        sys.modules.pop("json.tool", None)
        discover_pending()
        assert "json.tool" in sys.modules
    finally:
        names.apps.remove(made)


# -- on_after_configure / on_after_finalize and add_periodic_task -------------------------------


def test_on_after_configure_adds_periodic_tasks_that_become_schedules():
    made = Celery("periodic")
    fired: list[str] = []

    @made.on_after_configure.connect
    def setup_periodic_tasks(sender, **kwargs):
        fired.append("configure")
        sender.add_periodic_task(crontab(hour=3, minute=0), tasks.add.s(2, 3), name="adds")
        sender.add_periodic_task(30.0, tasks.add.s(1), args=(4,), queue="low")

    made.on_after_finalize.connect(lambda sender, **kwargs: fired.append("finalize"))
    try:
        discover_pending()
        assert fired == ["configure", "finalize"]
        beat = made.conf.beat_schedule
        assert beat["adds"]["task"] == "testproject.shop.tasks.add" and beat["adds"]["args"] == (
            2,
            3,
        )
        key = next(k for k in beat if k != "adds")  # unnamed: keyed by the signature's repr
        assert beat[key]["args"] == (4, 1) and beat[key]["options"] == {"queue": "low"}
        declare(beat, "UTC")
        nightly = next(h for h in declared() if h.name == "adds")
        assert nightly.cron == "0 3 * * *" and nightly.payload["args"] == [2, 3]
        every = next(h for h in declared() if h.name == key)
        assert every.every == timedelta(seconds=30) and every.queue == "low"
    finally:
        names.apps.remove(made)
        for name in list(made.conf.get("beat_schedule", {})):
            undeclare(name)


# -- celery.schedules, celery.utils.log, celery.signals -----------------------------------------


def test_celery_schedules_is_an_import_path_of_crontab_and_refuses_solar():
    from django_jobs.celery.schedules import crontab as imported
    from django_jobs.celery.schedules import schedule

    assert imported is crontab and schedule(timedelta(seconds=5)).run_every.total_seconds() == 5
    with pytest.raises(NotImplementedError, match="cron"):
        from django_jobs.celery.schedules import solar  # noqa: F401


def test_a_custom_schedule_class_is_refused_where_it_is_written():
    from django_jobs.celery import schedules

    with pytest.raises(NotImplementedError, match="A custom beat schedule class"):
        import django_jobs.celery.utils.time  # noqa: F401
    with pytest.raises(NotImplementedError, match="cron"):

        class Custom(schedules.BaseSchedule):  # type: ignore[name-defined]
            pass


def test_get_task_logger_is_the_modules_logger_under_celery_task():
    from django_jobs.celery.utils.log import get_task_logger

    logger = get_task_logger("proj.some.tasks")
    assert logger is logging.getLogger("proj.some.tasks")
    assert logger.parent is logging.getLogger("celery.task")
    with pytest.raises(RuntimeError):
        get_task_logger("celery.task")


def test_celery_signals_are_refused_at_import_with_the_native_way():
    with pytest.raises(NotImplementedError, match="job_event"):
        from django_jobs.celery.signals import task_failure  # noqa: F401
    with pytest.raises(NotImplementedError, match="LOGGING"):
        from django_jobs.celery.signals import setup_logging  # noqa: F401
    with pytest.raises(NotImplementedError, match="ready"):
        from django_jobs.celery.signals import worker_process_init  # noqa: F401


# -- AsyncResult.result while retrying and after failing ----------------------------------------


def test_a_retrying_tasks_result_is_the_error_it_retries_for_and_then_the_same_type(
    clock, project_tasks
):
    flaky, _ = project_tasks
    result = flaky.delay(7)
    run_until_idle()
    assert result.state == states.RETRY
    # Celery's backend stores the exc given to retry (autoretry_for's caught error) as the
    # result while the task waits to run again.
    assert isinstance(result.result, GatewayDown) and str(result.result) == "gateway down for 7"
    for _ in range(3):
        job = Job.objects.get(pk=result.job.pk)
        clock.move_to(job.run_at)
        run_until_idle()
    assert result.state == states.FAILURE and len(seen) == 3
    # The failure says the retries were spent, not that the type is not retried.
    error = Job.objects.get(pk=result.job.pk).error
    assert "retries of 'project.flaky' are spent" in error and "add the type" not in error
    # Celery rebuilds the exception's own class: the task's module defines it.
    assert type(result.result) is GatewayDown
    with pytest.raises(GatewayDown, match="gateway down for 7"):
        result.get(timeout=1)


def test_a_retry_without_an_error_reads_none_while_it_waits(clock, project_tasks):
    _, again = project_tasks
    result = again.delay()
    run_until_idle()
    assert result.state == states.RETRY and result.result is None
