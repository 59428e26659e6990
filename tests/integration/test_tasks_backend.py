"""``django_jobs.tasks.JobsBackend``: Django's Tasks framework running on the jobs engine.

The same tests run on Django 6 (``django.tasks``) and on Django 5.2 with the ``django-tasks``
backport, against PostgreSQL and SQLite. Process tests start a real ``manage.py runjobs
--burst``; in-process tests use ``run_until_idle`` and move the clock with ``time_machine``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.dispatch import Signal
from django.test import override_settings
from django.utils import timezone

import django_jobs
from django_jobs.kinds.registry import get, unregister
from django_jobs.models import Job, JobStep
from django_jobs.tasks import JobsBackend
from django_jobs.tasks.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_jobs.testing import run_until_idle
from testproject.jobs import record
from testproject.tasks import add, exits, explode, flaky, greet, introspect, not_json

try:
    from django.tasks.exceptions import TaskResultMismatch
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks.exceptions import TaskResultMismatch

BACKEND = "django_jobs.tasks.JobsBackend"
RETRYING = {
    "default": {"BACKEND": BACKEND},
    "retrying": {
        "BACKEND": BACKEND,
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"retry": {"attempts": 3, "delay": 0, "jitter": False}},
    },
}


class RollbackError(Exception):
    """Raised to roll back a test's ``transaction.atomic()`` block."""


@contextmanager
def listening(*signals: Signal) -> Iterator[list[tuple[str, Any]]]:
    """Collect (signal name, TaskResult snapshot) for each signal sent while inside."""
    names = {task_enqueued: "enqueued", task_started: "started", task_finished: "finished"}
    seen: list[tuple[str, Any]] = []
    receivers = []
    for signal in signals:

        def receiver(sender: type, task_result: Any, _name: str = names[signal], **kw: Any):
            assert sender is JobsBackend
            seen.append(
                (
                    _name,
                    {
                        "id": task_result.id,
                        "status": task_result.status,
                        "errors": [e.exception_class_path for e in task_result.errors],
                        "attempts": task_result.attempts,
                    },
                )
            )

        signal.connect(receiver)
        receivers.append((signal, receiver))
    try:
        yield seen
    finally:
        for signal, receiver in receivers:
            signal.disconnect(receiver)


@pytest.fixture
def retrying_backend() -> Iterator[None]:
    with override_settings(TASKS=RETRYING):
        yield
    unregister("django.tasks:retrying")


# -- a real worker process ---------------------------------------------------------------------


@pytest.mark.process
def test_runjobs_runs_sync_and_async_tasks_and_keeps_their_errors(spawn):
    now = timezone.now()
    summed = add.enqueue(2, 3)
    greeted = greet.using(run_after=now - timedelta(seconds=1), priority=50).enqueue(
        "ada", punctuation="?"
    )
    failed = explode.enqueue("kaboom")
    seen = introspect.enqueue(tag="proc")
    for result in (summed, greeted, failed, seen):
        assert result.status == TaskResultStatus.READY
        assert not result.is_finished and result.worker_ids == [] and result.errors == []
    row = Job.objects.get(pk=int(greeted.id))
    assert (row.kind, row.queue, row.priority, row.run_at) == (
        "django.tasks",
        "default",
        -50,
        now - timedelta(seconds=1),
    )
    assert row.payload["task"] == "testproject.tasks.greet"
    assert row.payload["kwargs"] == {"punctuation": "?"}

    worker = spawn("runjobs", "--burst")
    assert worker.wait() == 0, worker.output()
    worker_id = re.search(r"runjobs: worker (\S+) ready", worker.output()).group(1)

    done = add.get_result(summed.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.worker_ids == [worker_id] and done.attempts == 1
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at

    async_done = greet.get_result(greeted.id)
    assert async_done.status == TaskResultStatus.SUCCESSFUL
    assert async_done.return_value["greeting"] == "hello ada?"
    # Run in a worker process under runjobs: neither this process nor the supervising parent.
    assert async_done.return_value["pid"] not in (os.getpid(), worker.popen.pid)
    assert async_done.return_value["pid"] != os.getpid()

    broken = explode.get_result(failed.id)
    assert broken.status == TaskResultStatus.FAILED
    assert broken.is_finished and broken.finished_at is not None
    with pytest.raises(ValueError, match="failed"):
        broken.return_value  # noqa: B018 - Django raises for a failed task
    [error] = broken.errors
    assert error.exception_class is LookupError
    assert error.exception_class_path == "builtins.LookupError"
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert "testproject/tasks.py" in error.traceback
    assert error.traceback.rstrip().endswith("LookupError: kaboom")
    assert Job.objects.get(pk=int(failed.id)).state == "failed"

    context = introspect.get_result(seen.id).return_value
    assert context == {
        "tag": "proc",
        "id": seen.id,
        "attempt": 1,
        "status": "RUNNING",
        "worker_ids": [worker_id],
        "backend": "default",
        "args": [],
        "kwargs": {"tag": "proc"},
    }
    assert set(Job.objects.values_list("kind", "state")) == {
        ("django.tasks", "succeeded"),
        ("django.tasks", "failed"),
    }


@pytest.mark.process
def test_run_after_in_the_future_waits_until_due(spawn):
    later = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(20, 22)

    first = spawn("runjobs", "--burst")
    assert first.wait() == 0, first.output()
    waiting = add.get_result(later.id)
    assert waiting.status == TaskResultStatus.READY and waiting.started_at is None
    assert Job.objects.get(pk=int(later.id)).state == "queued"

    Job.objects.filter(pk=int(later.id)).update(run_at=timezone.now() - timedelta(seconds=1))
    second = spawn("runjobs", "--burst")
    assert second.wait() == 0, second.output()
    assert add.get_result(later.id).return_value == 42


# -- enqueue joins the caller's transaction ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_joins_the_transaction_and_signals_after_commit():
    with listening(task_enqueued) as seen:
        with pytest.raises(RollbackError), transaction.atomic():
            ghost = add.enqueue(1, 2)
            assert Job.objects.filter(pk=int(ghost.id)).exists()
            raise RollbackError
        assert not Job.objects.exists()
        assert seen == []
        with pytest.raises(TaskResultDoesNotExist):
            add.get_result(ghost.id)

        with transaction.atomic():
            kept = add.enqueue(2, 2)
            assert seen == []  # not before the commit
        assert seen == [
            (
                "enqueued",
                {"id": kept.id, "status": TaskResultStatus.READY, "errors": [], "attempts": 0},
            )
        ]

        outside = add.enqueue(3, 3)  # autocommit: sent at once
        assert [s[1]["id"] for s in seen] == [kept.id, outside.id]
    assert [j.kind for j in run_until_idle()] == ["django.tasks", "django.tasks"]


# -- in process: time, priority, context, signals ----------------------------------------------


@pytest.mark.django_db
def test_run_after_runs_when_the_clock_reaches_it():
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False) as traveller:
        due = start + timedelta(minutes=10)
        result = add.using(run_after=due).enqueue(1, 1)
        assert Job.objects.get(pk=int(result.id)).run_at == due
        assert run_until_idle() == []
        traveller.shift(timedelta(minutes=9, seconds=59))
        assert run_until_idle() == []
        assert add.get_result(result.id).status == TaskResultStatus.READY
        traveller.shift(timedelta(seconds=1))
        [ran] = run_until_idle()
        assert ran.pk == int(result.id)
        done = add.get_result(result.id)
        assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 2
        assert done.started_at == due and done.finished_at == due
        assert done.task.run_after == due


@pytest.mark.django_db
def test_higher_django_priority_runs_first():
    low = add.using(priority=-10).enqueue(0, 0)
    middle = add.enqueue(1, 1)
    high = add.using(priority=90).enqueue(2, 2)
    rows = dict(Job.objects.values_list("id", "priority"))
    assert [rows[int(r.id)] for r in (low, middle, high)] == [10, 0, -90]
    assert [str(j.pk) for j in run_until_idle()] == [high.id, middle.id, low.id]
    assert add.get_result(high.id).task.priority == 90


@pytest.mark.django_db
def test_takes_context_receives_the_task_result_and_attempt():
    result = introspect.enqueue(tag="ctx")
    run_until_idle()
    done = introspect.get_result(result.id)
    assert done.return_value == {
        "tag": "ctx",
        "id": result.id,
        "attempt": 1,
        "status": "RUNNING",
        "worker_ids": ["inline"],
        "backend": "default",
        "args": [],
        "kwargs": {"tag": "ctx"},
    }
    assert done.worker_ids == ["inline"]


@pytest.mark.django_db
def test_signals_fire_as_django_documents_them(django_capture_on_commit_callbacks):
    with listening(task_enqueued, task_started, task_finished) as seen:
        with django_capture_on_commit_callbacks(execute=True):
            ok = add.enqueue(1, 2)
            bad = explode.enqueue("no")
        run_until_idle()
    assert seen == [
        ("enqueued", {"id": ok.id, "status": "READY", "errors": [], "attempts": 0}),
        ("enqueued", {"id": bad.id, "status": "READY", "errors": [], "attempts": 0}),
        ("started", {"id": ok.id, "status": "RUNNING", "errors": [], "attempts": 1}),
        ("finished", {"id": ok.id, "status": "SUCCESSFUL", "errors": [], "attempts": 1}),
        ("started", {"id": bad.id, "status": "RUNNING", "errors": [], "attempts": 1}),
        (
            "finished",
            {"id": bad.id, "status": "FAILED", "errors": ["builtins.LookupError"], "attempts": 1},
        ),
    ]


@pytest.mark.django_db
def test_async_enqueue_and_get_result():
    result = async_to_sync(greet.aenqueue)("async", punctuation=".")
    assert result.status == TaskResultStatus.READY
    run_until_idle()
    done = async_to_sync(greet.aget_result)(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value["greeting"] == "hello async."
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL


# -- retries (backend OPTIONS) -----------------------------------------------------------------


@pytest.mark.django_db
def test_retry_option_retries_and_keeps_every_error(retrying_backend):
    with listening(task_started, task_finished) as seen:
        result = flaky.using(backend="retrying", queue_name="emails").enqueue(succeed_on=3)
        row = Job.objects.get(pk=int(result.id))
        assert (row.kind, row.queue, row.max_attempts) == ("django.tasks:retrying", "emails", 3)
        assert [j.state for j in run_until_idle()] == ["queued", "queued", "succeeded"]
    done = task_backends["retrying"].get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 3
    assert done.attempts == 3 and done.worker_ids == ["inline"] * 3
    assert [e.exception_class for e in done.errors] == [ConnectionError, ConnectionError]
    assert "attempt 2 failed on purpose" in done.errors[1].traceback
    assert [name for name, _ in seen] == ["started", "started", "started", "finished"]
    steps = list(JobStep.objects.filter(job_id=int(result.id)).values_list("name", flat=True))
    assert steps == ["attempt-1", "error-1", "attempt-2", "error-2", "attempt-3"]

    spent = flaky.using(backend="retrying").enqueue(succeed_on=9)
    run_until_idle()
    failed = task_backends["retrying"].get_result(spent.id)
    assert failed.status == TaskResultStatus.FAILED and failed.attempts == 3
    assert len(failed.errors) == 3
    assert "MAX_ATTEMPTS" in Job.objects.get(pk=int(spent.id)).error


@pytest.mark.django_db
def test_engine_option_puts_the_kind_on_that_engine():
    tasks = {**RETRYING, "fleet": {"BACKEND": BACKEND, "OPTIONS": {"engine": "fleet"}}}
    try:
        with override_settings(TASKS=tasks):
            result = add.using(backend="fleet").enqueue(4, 4)
            row = Job.objects.get(pk=int(result.id))
            assert (row.kind, row.engine) == ("django.tasks:fleet", "fleet")
            assert run_until_idle(engine="default") == []
            assert [j.state for j in run_until_idle(engine="fleet")] == ["succeeded"]
            assert task_backends["fleet"].get_result(result.id).return_value == 8
            with pytest.raises(TaskResultDoesNotExist):  # each alias reads its own kind
                task_backends["default"].get_result(result.id)
    finally:
        unregister("django.tasks:fleet")
        unregister("django.tasks:retrying")


@pytest.mark.django_db
def test_default_is_one_attempt():
    result = flaky.enqueue(succeed_on=2)
    assert Job.objects.get(pk=int(result.id)).max_attempts == 1
    assert [j.state for j in run_until_idle()] == ["failed"]
    assert flaky.get_result(result.id).attempts == 1


# -- the kind, results and refusals ------------------------------------------------------------


@pytest.mark.django_db
def test_tasks_run_as_a_registered_kind():
    rows = {row["kind"]: row for row in django_jobs.describe_kinds()}
    assert rows["django.tasks"]["engine"] == "default"
    assert rows["django.tasks"]["retry"]["attempts"] == 1
    assert get("django.tasks").func.__module__ == "django_jobs.tasks.runner"
    result = add.enqueue(5, 5)
    assert django_jobs.inspect_job(int(result.id))["kind"] == "django.tasks"


@pytest.mark.django_db
def test_get_result_refuses_unknown_ids_and_other_tasks():
    for bogus in ("nope", "0", "-3", str(2**70), "999999"):
        with pytest.raises(TaskResultDoesNotExist):
            add.get_result(bogus)
    other_kind = record.enqueue({"n": 1})
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(other_kind.pk))
    summed = add.enqueue(1, 1)
    with pytest.raises(TaskResultMismatch):
        explode.get_result(summed.id)


@pytest.mark.django_db
def test_arguments_and_return_values_must_be_json():
    with pytest.raises(TypeError, match="not JSON serializable"):
        add.enqueue(timezone.now(), 1)
    assert not Job.objects.exists()
    tupled = add.enqueue(1, 2)
    assert add.get_result(tupled.id).args == [1, 2]

    result = not_json.enqueue()
    run_until_idle()
    failed = not_json.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is TypeError


@pytest.mark.django_db
def test_task_raising_system_exit_fails_like_any_exception():
    # As Django's own backends do: only KeyboardInterrupt propagates.
    with listening(task_finished) as seen:
        result = exits.enqueue(4)
        assert [j.state for j in run_until_idle()] == ["failed"]
    failed = exits.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is SystemExit
    assert "SystemExit" in failed.errors[0].traceback
    assert [(name, data["status"]) for name, data in seen] == [
        ("finished", TaskResultStatus.FAILED)
    ]


@pytest.mark.django_db
def test_cancelled_task_is_failed_with_the_cancel_as_its_error():
    result = add.using(run_after=timezone.now() + timedelta(days=1)).enqueue(1, 1)
    django_jobs.cancel(int(result.id))
    cancelled = add.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.worker_ids == []
    assert cancelled.errors[0].exception_class_path == "django_jobs.exceptions.Cancelled"


@pytest.mark.django_db
def test_task_that_can_no_longer_run_is_blocked_with_the_reason():
    def stored(task: str, queue_name: str = "default") -> dict[str, Any]:
        return {
            "task": task,
            "args": [1, 2],
            "kwargs": {},
            "backend": "default",
            "queue_name": queue_name,
            "priority": 0,
            "run_after": None,
        }

    handle = task_backends["default"].handle
    removed = handle.enqueue(stored("testproject.tasks.removed"))
    [ran] = run_until_idle()
    assert ran.state == "blocked"
    assert "cannot be imported" in ran.error and "retry the job" in ran.error
    error = JobStep.objects.get(job_id=removed.pk, name="error-1").value
    assert error["exception_class_path"] == "builtins.ImportError"
    with pytest.raises(ImportError, match=r"testproject\.tasks\.removed"):
        add.get_result(str(removed.pk))

    dropped_queue = handle.enqueue(stored("testproject.tasks.add", queue_name="retired"))
    [ran] = run_until_idle()
    assert ran.state == "blocked" and "no longer be rebuilt" in ran.error
    assert JobStep.objects.filter(job_id=dropped_queue.pk, name="error-1").exists()


def plain(x: int) -> int:
    """A module-level function whose module attribute is not a task."""
    return x


@pytest.mark.django_db
def test_tasks_must_be_importable_by_their_path():
    def local(x: int) -> int:
        return x

    with pytest.raises(InvalidTask, match="module level"):
        add.__class__(func=local, backend="default")
    unreachable = add.__class__(func=plain, backend="default")
    with pytest.raises(InvalidTask, match="cannot be imported by that path"):
        unreachable.enqueue(1)
    assert not Job.objects.exists()


# -- configuration -----------------------------------------------------------------------------


def test_bad_options_are_system_check_errors_and_refuse_enqueue():
    bad = JobsBackend("bad", {"BACKEND": BACKEND, "OPTIONS": {"retry": {"attempts": 0}}})
    assert [m.id for m in bad.check()] == ["django_jobs.E101"]
    assert get("django.tasks:bad") is None
    with pytest.raises(ImproperlyConfigured, match="attempts"):
        bad.handle  # noqa: B018
    typo = JobsBackend("typo", {"BACKEND": BACKEND, "OPTIONS": {"engin": "fleet"}})
    assert "unknown keys ['engin']" in next(iter(typo.check())).msg

    elsewhere = JobsBackend("elsewhere", {"BACKEND": BACKEND, "OPTIONS": {"engine": "nope"}})
    try:
        assert [m.id for m in elsewhere.check()] == ["django_jobs.E102"]
        fleet = JobsBackend("fleet", {"BACKEND": BACKEND, "OPTIONS": {"engine": "fleet"}})
        assert list(fleet.check()) == []
        assert get("django.tasks:fleet").engine == "fleet"
    finally:
        unregister("django.tasks:elsewhere")
        unregister("django.tasks:fleet")


def test_supports_flags_are_true():
    backend = task_backends["default"]
    assert isinstance(backend, JobsBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
