"""A shop's Celery tasks, written as Celery's documentation writes them; only the import is
``django_jobs.celery`` instead of ``celery``."""

from __future__ import annotations

import os
import time

from django_jobs.celery import Task, shared_task
from django_jobs.celery.exceptions import Ignore, Reject, SoftTimeLimitExceeded

#: What the tasks and their handlers did, in order (the tests read and clear it).
seen: list[tuple] = []


@shared_task
def add(x, y):
    return x + y


@shared_task(name="shop.tasks.total")
def total(numbers, extra=0):
    seen.append(("total", list(numbers), extra))
    return sum(numbers) + extra


@shared_task
def boom(message):
    seen.append(("boom", message))
    raise KeyError(message)


@shared_task(bind=True)
def charge(self, order, fail_times):
    """Retries on a payment gateway's hiccup, as Celery's guide shows: 5 s apart, 3 retries."""
    seen.append(("charge", order, self.request.retries))
    try:
        if self.request.retries < fail_times:
            raise ConnectionError("gateway timed out")
    except ConnectionError as exc:
        raise self.retry(exc=exc, countdown=5) from exc
    return {"order": order, "charged": True}


@shared_task(bind=True, max_retries=2, default_retry_delay=30)
def poll(self, what):
    """``self.retry()`` with neither exc nor countdown: ``default_retry_delay``, then
    ``MaxRetriesExceededError``."""
    seen.append(("poll", what, self.request.retries))
    raise self.retry()


@shared_task(bind=True, max_retries=1)
def stubborn(self):
    """A call's own ``max_retries`` above the task's."""
    seen.append(("stubborn", self.request.retries))
    raise self.retry(countdown=1, max_retries=3)


@shared_task(
    autoretry_for=(ConnectionError,),
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=False,
    max_retries=4,
)
def fetch_rates(currency):
    seen.append(("fetch_rates", currency))
    raise ConnectionError("rates service down")


@shared_task(
    autoretry_for=(ConnectionError,),
    retry_backoff=2,
    retry_backoff_max=5,
    retry_jitter=False,
    max_retries=4,
)
def fetch_capped(currency):
    seen.append(("fetch_capped", currency))
    raise ConnectionError("rates service down")


@shared_task(autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=5)
def fetch_jittered(currency):
    seen.append(("fetch_jittered", currency))
    raise ConnectionError("rates service down")


@shared_task
def stamp(when, amount, ref, day=None):
    """Celery's JSON types in and out."""
    seen.append(("stamp", when, amount, ref, day))
    return {"when": when, "amount": amount, "ref": ref, "day": day}


@shared_task(soft_time_limit=0.2)
def export(rows):
    started = time.monotonic()
    try:
        while True:  # pure Python past its soft limit, no check of its own
            rows += 1
    except SoftTimeLimitExceeded:
        seen.append(("export", "cleaned up", round(time.monotonic() - started, 1)))
        return "partial"


class AuditedTask(Task):
    def on_success(self, retval, task_id, args, kwargs):
        seen.append(("on_success", retval, task_id, args, kwargs))

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        seen.append(
            ("on_failure", type(exc).__name__, task_id, args, kwargs, "KeyError" in str(einfo))
        )

    def on_retry(self, exc, task_id, args, kwargs, einfo):
        seen.append(("on_retry", type(exc).__name__, task_id, args, kwargs))

    def after_return(self, status, retval, task_id, args, kwargs, einfo):
        seen.append(("after_return", status, task_id))


@shared_task(base=AuditedTask, bind=True, max_retries=1)
def audited(self, order, fail):
    if fail == "retry" and self.request.retries == 0:
        raise self.retry(exc=ConnectionError("again"), countdown=0)
    if fail == "fail":
        raise KeyError(order)
    return {"order": order}


@shared_task
def skip(order):
    raise Ignore()


@shared_task(bind=True)
def bounce(self, requeue):
    seen.append(("bounce", self.request.retries))
    if self.request.retries == 0:
        raise Reject("not now", requeue=requeue)
    return "second time"


@shared_task(bind=True)
def report(self, steps):
    self.update_state(state="PROGRESS", meta={"current": 1, "total": steps})
    seen.append(("report", self.request.id))
    return steps


@shared_task(ignore_result=True)
def notify(user):
    seen.append(("notify", user))
    return {"sent": user}


@shared_task(queue="shop.mail", priority=5, expires=60)
def mail(to):
    return to


@shared_task(bind=True, soft_time_limit=1, time_limit=2)
def spin(self, stubborn):
    """Pure Python past its soft limit: caught, it returns (a success); ``stubborn``, it spins
    on, and is stopped at its hard limit (a failure)."""
    rounds = 0
    try:
        while True:
            rounds += 1
    except SoftTimeLimitExceeded:
        while stubborn:
            rounds += 1
    return {"soft": True, "pid": os.getpid()}


@shared_task
def on_error(request, exc, traceback):
    """A new-style errback: called in the worker with the failed call's request."""
    seen.append(("errback", request.id, type(exc).__name__, "KeyError" in traceback))


@shared_task
def on_error_id(task_id):
    """An old-style errback: enqueued with the failed task's id."""
    seen.append(("errback-id", task_id))


@shared_task(bind=True)
def look(self):
    """What AsyncResult says of this very task while it runs."""
    from django_jobs.celery import AsyncResult, current_task

    seen.append(("look", AsyncResult(self.request.id).state, current_task.name))
    return "looked"


@shared_task(throws=(LookupError,))
def lookup_order(order):
    """An expected error (``throws``): a failure, logged without its traceback."""
    raise LookupError(f"no order {order}")
