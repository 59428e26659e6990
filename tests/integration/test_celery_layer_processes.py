"""``django_jobs.celery`` under a real worker (``manage.py runjobs --processes 2``): a task's
soft limit raises inside its body in a child process, its hard limit stops it there, a retry
asked with ``self.retry`` runs again, and ``AsyncResult.get()`` in another process waits for
each to end."""

from __future__ import annotations

import pytest

from django_jobs.celery import states
from django_jobs.celery.exceptions import TimeLimitExceeded
from django_jobs.models import Job
from testproject.shop import tasks

pytestmark = [pytest.mark.process, pytest.mark.engine]


def test_limits_and_retries_of_celery_tasks_in_worker_processes(spawn):
    caught = tasks.spin.delay(False)  # past its soft limit of 1 s: caught in the body
    stopped = tasks.spin.delay(True)  # past its hard limit of 2 s: stopped there
    charged = tasks.charge.apply_async(("A-1", 1), countdown=0)
    added = tasks.add.delay(20, 22)
    worker = spawn("runjobs", "--processes", "2", "--no-scheduler")
    try:
        assert added.get(timeout=60, interval=0.05) == 42
        value = caught.get(timeout=60, interval=0.05)
        assert value["soft"] is True
        assert value["pid"] != worker.popen.pid  # it ran in a child process
        with pytest.raises(TimeLimitExceeded):
            stopped.get(timeout=60, interval=0.05)
        # self.retry(countdown=5): the second run is due 5 s after the first.
        assert charged.get(timeout=60, interval=0.05) == {"order": "A-1", "charged": True}
    except BaseException:
        print(worker.output())  # the worker's own account, beside the failure
        raise
    assert charged.retries == 1 and charged.state == states.SUCCESS
    assert Job.objects.get(pk=int(stopped.id)).error.startswith("JOB_TIMEOUT: stopped at")
