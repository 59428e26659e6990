"""What ``django_jobs.celery`` cannot mean as Celery does is refused where it is written: an
option at import, an argument at the call, each naming the native way; and the Celery app
object (``Celery(...)``, ``config_from_object``, ``autodiscover_tasks``, beat)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_jobs.celery import Celery, crontab, shared_task
from django_jobs.celery.beat import declare, entry_schedule
from django_jobs.engine.schedules import declared, undeclare
from django_jobs.kinds.registry import get
from django_jobs.models import Job
from testproject.shop import tasks
from testproject.shop.celery import app

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("option", "value", "native"),
    [
        ("serializer", "pickle", "JSON"),
        ("compression", "gzip", "compress"),
        ("backend", "redis://", "job's row"),
        ("exchange", "orders", "queue="),
        ("routing_key", "orders.high", "queue="),
        ("pydantic", True, "@job\\(input="),
    ],
)
def test_an_option_that_cannot_keep_its_meaning_is_refused_at_import(option, value, native):
    with pytest.raises(NotImplementedError, match=native):

        @shared_task(name=f"refused.{option}", **{option: value})
        def body():
            return None

    assert get(f"refused.{option}") is None


@pytest.mark.parametrize(
    ("option", "native"),
    [
        ("headers", "no broker|none reads them.*kwargs"),
        ("routing_key", "queue="),
        ("time_limit", "set time_limit on the task"),
        ("compression", "compress"),
        ("connection", "DATABASE"),
    ],
)
def test_an_apply_async_option_that_cannot_keep_its_meaning_is_refused_at_the_call(option, native):
    with pytest.raises(NotImplementedError, match=native):
        tasks.add.apply_async((1, 2), **{option: "x"})
    assert not Job.objects.exists()


def test_retry_with_new_arguments_or_without_throw_is_refused_naming_the_native_way():
    with pytest.raises(NotImplementedError, match="apply_async"):
        tasks.add.retry(args=(1,))
    with pytest.raises(NotImplementedError, match=r"raise self\.retry"):
        tasks.add.retry(throw=False)


def test_retry_called_directly_raises_the_error_itself():
    with pytest.raises(ConnectionError):
        tasks.charge("A-9", 1)  # called as a function: no worker, the error as in Celery


def test_an_app_attribute_that_is_not_offered_says_so_and_reads_as_missing():
    with pytest.raises(NotImplementedError, match="runjobs"):
        app.control  # noqa: B018
    assert not hasattr(app, "control")


def test_the_apps_conf_reads_the_django_settings_of_its_namespace(settings):
    settings.CELERY_TIMEZONE = "Europe/Paris"
    settings.CELERY_TASK_ACKS_LATE = True
    fresh = Celery("proj")
    fresh.config_from_object("django.conf:settings", namespace="CELERY")
    assert fresh.conf.timezone == "Europe/Paris" and fresh.conf.task_acks_late is True
    assert fresh.task is not None


def test_autodiscover_tasks_imported_the_apps_tasks_modules():
    assert get("testproject.shop.tasks.add") is not None  # found by app.autodiscover_tasks()


def test_crontab_fields_are_a_cron_expression():
    assert crontab().cron == "* * * * *"
    assert crontab(minute=0, hour=3).cron == "0 3 * * *"
    assert crontab(minute="*/15", day_of_week="mon-fri").cron == "*/15 * * * mon-fri"
    assert crontab(hour=7, minute=30, day_of_month=1, month_of_year="1,7").cron == "30 7 1 1,7 *"


def test_beat_entries_become_declared_schedules_in_the_celery_timezone():
    entries = {
        "nightly-totals": {
            "task": "shop.tasks.total",
            "schedule": crontab(minute=0, hour=3),
            "args": ([1, 2],),
            "kwargs": {"extra": 1},
            "options": {"queue": "shop.reports", "expires": 600},
        },
        "rates-every-20s": {"task": tasks.add.name, "schedule": timedelta(seconds=20)},
        "rates-every-30s": {"task": tasks.add.name, "schedule": 30.0, "args": (1, 2)},
    }
    try:
        declare(entries, "Europe/Paris")
        by_name = {handle.name: handle for handle in declared()}
        nightly = by_name["nightly-totals"]
        assert (nightly.cron, nightly.tz, nightly.kind) == (
            "0 3 * * *",
            "Europe/Paris",
            "shop.tasks.total",
        )
        assert nightly.payload == {"args": [[1, 2]], "kwargs": {"extra": 1}}
        assert nightly.queue == "shop.reports"
        assert by_name["rates-every-20s"].every == timedelta(seconds=20)
        assert by_name["rates-every-30s"].payload == {"args": [1, 2], "kwargs": {}}
    finally:
        for name in entries:
            undeclare(name)


def test_a_beat_entry_that_cannot_be_kept_is_refused_naming_the_native_way():
    with pytest.raises(ValueError, match="not a registered task"):
        entry_schedule("x", {"task": "nope.nothing", "schedule": 10}, "UTC")
    with pytest.raises(NotImplementedError, match="cron"):
        entry_schedule("x", {"task": tasks.add.name, "schedule": object()}, "UTC")
    with pytest.raises(NotImplementedError, match="queue, priority and expires"):
        entry_schedule("x", {"task": tasks.add.name, "schedule": 10, "options": {"link": 1}}, "UTC")


def test_a_name_of_celerys_api_that_is_not_offered_fails_at_its_import():
    with pytest.raises(NotImplementedError, match=r"docs/migrating-from-celery\.md"):
        from django_jobs.celery import uuid  # noqa: F401
