"""What a ported Celery task means, kept: ``JOBS["DEFAULT_RETRY"]`` sets the policy of every
kind that names none, ``Retry(on=RetryLater)`` retries only on the runner's own request (as
``self.retry()``), ``idempotency_key="call"`` makes every enqueue its own job while
``"payload"`` keeps coalescing, and ``queue=None`` is the default queue."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from django_jobs import IdempotencyRequired, Retry, RetryLater, job
from django_jobs.canvas import FLOW_KIND
from django_jobs.kinds.handle import default_retry
from django_jobs.kinds.registry import check_default_retry, lookup, unregister
from django_jobs.models import Job
from django_jobs.testing import run_until_idle
from testproject.models import Execution

pytestmark = pytest.mark.django_db


@pytest.fixture
def kinds():
    """``kinds(kind, **options)`` decorates a runner as ``@job`` would; unregistered after."""
    made: list[str] = []

    def register(kind: str, **options):
        options.setdefault("idempotency_key", "payload")

        def decorate(func):
            made.append(kind)
            return job(kind, **options)(func)

        return decorate

    yield register
    for kind in made:
        unregister(kind)


def effects(label: str) -> int:
    return Execution.objects.filter(label=label).count()


def effect(ctx, label: str) -> None:
    Execution.objects.create(job_id=ctx.job.pk, label=label, attempt=ctx.attempt)


# -- JOBS["DEFAULT_RETRY"] -------------------------------------------------------------------


def test_a_kind_without_retry_follows_default_retry_read_when_used(kinds, settings):
    @kinds("celery_defaults.pay")
    def pay(ctx):
        effect(ctx, "pay")
        raise ConnectionError("the provider timed out")

    assert pay.own_retry is None and pay.retry.attempts == 3  # Retry() without the setting
    settings.JOBS = {**settings.JOBS, "DEFAULT_RETRY": Retry(attempts=1)}
    assert pay.retry.attempts == 1  # the kind was defined before: the setting still applies
    assert pay.describe()["retry"]["attempts"] == 1

    paid = pay.enqueue({"order": 1})
    assert paid.max_attempts == 1
    run_until_idle()
    paid.refresh_from_db()
    assert paid.state == "failed" and paid.attempts == 1 and effects("pay") == 1  # run once
    assert paid.error.startswith("MAX_ATTEMPTS: Retries are spent after 1 attempt(s)")


def test_a_kind_that_names_its_retry_keeps_it_whatever_default_retry_says(kinds, settings):
    settings.JOBS = {**settings.JOBS, "DEFAULT_RETRY": Retry(attempts=1)}

    @kinds("celery_defaults.sync", retry=Retry(attempts=2, delay=0))
    def sync(ctx):
        effect(ctx, "sync")
        raise ConnectionError("down")

    assert sync.retry.attempts == 2
    synced = sync.enqueue({})
    run_until_idle()
    synced.refresh_from_db()
    assert synced.state == "failed" and synced.attempts == 2 and effects("sync") == 2


def test_the_default_retrys_on_and_backoff_apply_too(kinds, settings):
    settings.JOBS = {
        **settings.JOBS,
        "DEFAULT_RETRY": Retry(attempts=5, delay=0, on=RetryLater),
    }

    @kinds("celery_defaults.lookup")
    def look(ctx):
        return ctx.payload["missing"]  # KeyError: not a RetryLater

    looked = look.enqueue({})
    run_until_idle()
    looked.refresh_from_db()
    assert looked.state == "failed" and looked.attempts == 1
    assert looked.error.startswith("NOT_RETRIED: KeyError is not retried")


def test_the_flow_kind_keeps_its_own_retry(settings):
    settings.JOBS = {**settings.JOBS, "DEFAULT_RETRY": Retry(attempts=1)}
    assert lookup(FLOW_KIND).retry.attempts == 3


def test_a_default_retry_that_is_not_a_retry_is_a_system_check_error(settings):
    assert check_default_retry() == []
    settings.JOBS = {**settings.JOBS, "DEFAULT_RETRY": {"attempts": 1}}
    (error,) = check_default_retry()
    assert error.id == "django_jobs.E013"
    assert "{'attempts': 1} is not a Retry" in error.msg
    assert "Retry(attempts=1)" in error.hint and "from django_jobs import Retry" in error.hint
    with pytest.raises(ImproperlyConfigured, match="is not a Retry"):
        default_retry()
    settings.JOBS = {**settings.JOBS, "DEFAULT_RETRY": None}
    assert check_default_retry() == [] and default_retry() == Retry()


def test_retry_that_is_not_a_retry_is_refused_at_decoration():
    with pytest.raises(TypeError, match=r"pass a Retry, e\.g\. retry=Retry\(attempts=1\)"):
        job("celery_defaults.bad_retry", idempotency_key="payload", retry={"attempts": 1})


# -- Retry(on=RetryLater): Celery's self.retry() alone ---------------------------------------


def test_on_retry_later_retries_when_the_runner_asks(kinds):
    @kinds("celery_defaults.poll", retry=Retry(attempts=3, delay=0, on=RetryLater))
    def poll(ctx):
        effect(ctx, "poll")
        if ctx.attempt < 3:
            raise RetryLater("not ready")
        return "ready"

    polled = poll.enqueue({})
    run_until_idle()
    polled.refresh_from_db()
    assert polled.state == "succeeded" and polled.attempts == 3 and effects("poll") == 3


def test_on_retry_later_fails_at_once_on_any_other_exception_saying_why(kinds):
    @kinds("celery_defaults.parse", retry=Retry(attempts=6, delay=0, on=RetryLater))
    def parse(ctx):
        effect(ctx, "parse")
        return {}["id"]

    parsed = parse.enqueue({})
    run_until_idle()
    parsed.refresh_from_db()
    assert parsed.state == "failed" and parsed.attempts == 1 and effects("parse") == 1
    first, *rest = parsed.error.splitlines()
    assert first == (
        "NOT_RETRIED: KeyError is not retried: Retry(on=RetryLater) of 'celery_defaults.parse' "
        "retries only when its runner raises RetryLater, as Celery's self.retry() does, so "
        "attempt 1 failed the job at once. Fix the cause, then retry it (`manage.py jobs retry "
        "ID`), or raise RetryLater where a retry is meant."
    )
    assert rest[0].startswith("Last error: KeyError")


def test_on_retry_later_spends_its_attempts_like_max_retries(kinds):
    @kinds("celery_defaults.never_ready", retry=Retry(attempts=2, delay=0, on=RetryLater))
    def never_ready(ctx):
        raise RetryLater("still not ready")

    waited = never_ready.enqueue({})
    run_until_idle()
    waited.refresh_from_db()
    assert waited.state == "failed" and waited.attempts == 2
    assert "(last error: RetryLater: still not ready)" in waited.error.splitlines()[0]


def test_retry_later_retries_whatever_on_lists_and_on_stays_required():
    assert Retry(on=RetryLater).on == (RetryLater,)
    assert Retry(on=RetryLater).as_json()["on"] == ["django_jobs.exceptions.RetryLater"]
    with pytest.raises(ValueError, match="pass an exception class"):
        Retry(on=())


# -- idempotency_key="call" and "payload" -----------------------------------------------------


def test_call_makes_every_enqueue_its_own_job(kinds):
    @kinds("celery_defaults.notify", idempotency_key="call")
    def notify(ctx):
        effect(ctx, f"notify:{ctx.payload['text']}")

    first = notify.enqueue({"text": "hi"})
    second = notify.enqueue({"text": "hi"})
    assert first.pk != second.pk and not second.deduped
    assert first.idempotency_key.startswith("call:") and second.idempotency_key.startswith("call:")
    assert first.idempotency_key != second.idempotency_key
    batch = notify.enqueue_many([{"text": "hi"}] * 3)  # one round trip, three jobs
    assert len({j.pk for j in batch}) == 3 and not any(j.deduped for j in batch)
    run_until_idle()
    assert effects("notify:hi") == 5


def test_call_with_an_explicit_key_still_coalesces_on_that_key(kinds):
    @kinds("celery_defaults.submit", idempotency_key="call")
    def submit(ctx):
        return None

    first = submit.enqueue({"form": 1}, idempotency_key="form-1")
    again = submit.enqueue({"form": 1}, idempotency_key="form-1")
    assert again.pk == first.pk and again.deduped


def test_a_call_kind_that_enqueues_its_own_payload_from_inside_runs_it_again(kinds):
    @kinds("celery_defaults.poll_feed", idempotency_key="call")
    def poll_feed(ctx):
        effect(ctx, "poll_feed")
        if effects("poll_feed") < 3:
            # Celery: poll_feed.delay(same arguments) from inside the task, a new run each
            # time. Keyed by payload, this would be the loop's mistake (JobDuplicate).
            poll_feed.enqueue(ctx.payload)
        return ctx.payload

    poll_feed.enqueue({"feed": "news"})
    run_until_idle()
    runs = Job.objects.filter(kind="celery_defaults.poll_feed").order_by("pk")
    assert [(j.state, j.result) for j in runs] == [("succeeded", {"feed": "news"})] * 3
    assert effects("poll_feed") == 3


def test_describe_and_the_kinds_listing_show_the_policy_in_force(kinds, settings):
    @kinds("celery_defaults.listed")
    def listed(ctx):
        return None

    def attempts_listed() -> int:
        out = StringIO()
        call_command("jobs", "kinds", "--json", stdout=out)
        (row,) = [r for r in json.loads(out.getvalue()) if r["kind"] == "celery_defaults.listed"]
        return row["retry"]["attempts"]

    assert attempts_listed() == 3
    settings.JOBS = {**settings.JOBS, "DEFAULT_RETRY": Retry(attempts=1, on=RetryLater)}
    assert attempts_listed() == 1
    assert listed.describe()["retry"]["on"] == ["django_jobs.exceptions.RetryLater"]


def test_payload_coalesces_while_the_job_is_queued_and_not_once_it_ended(kinds):
    @kinds("celery_defaults.digest", idempotency_key="payload")
    def digest(ctx):
        effect(ctx, "digest")

    first = digest.enqueue({"day": 1})
    again = digest.enqueue({"day": 1})
    assert again.pk == first.pk and again.deduped
    run_until_idle()
    later = digest.enqueue({"day": 1})
    assert later.pk != first.pk and not later.deduped
    run_until_idle()
    assert effects("digest") == 2


@pytest.mark.parametrize("name", ["payload ", "Payload", "calls", "", "uuid"])
def test_an_unknown_key_name_is_refused_at_decoration_naming_both(name):
    with pytest.raises(IdempotencyRequired) as refused:
        job("celery_defaults.unknown_key", idempotency_key=name)
    assert '"payload"' in str(refused.value) and '"call"' in str(refused.value)


@hypothesis_settings(max_examples=50, deadline=None)
@given(st.text(max_size=12).filter(lambda s: s not in ("payload", "call")))
def test_any_other_string_is_refused_at_decoration(name):
    with pytest.raises(IdempotencyRequired, match="every enqueue its own job"):
        job("celery_defaults.any_key", idempotency_key=name)


# -- queue=None -----------------------------------------------------------------------------


def test_queue_none_is_the_default_queue_at_decoration_and_at_enqueue(kinds):
    @kinds("celery_defaults.routed", queue=None)
    def routed(ctx):
        return ctx.job.queue

    assert routed.queue == "default" and routed.describe()["queue"] == "default"
    queued = routed.enqueue({"n": 1}, queue=None)  # enqueue(queue=None): the kind's queue
    assert queued.queue == "default"
    elsewhere = routed.enqueue({"n": 2}, queue="urgent")
    assert elsewhere.queue == "urgent"
    run_until_idle()
    assert Job.objects.get(pk=queued.pk).result == "default"


def test_queue_none_on_a_kind_with_its_own_queue_at_enqueue_keeps_the_kinds(kinds):
    @kinds("celery_defaults.media", queue="media")
    def media(ctx):
        return None

    assert media.enqueue({}, queue=None).queue == "media"
    assert media.s({}, queue=None).enqueue().queue == "media"


@pytest.mark.parametrize("queue", ["", "   ", 5, "bad\x00queue"])
def test_a_queue_that_names_nothing_is_refused_at_decoration(queue):
    with pytest.raises(ValueError, match=r"test_celery_defaults\.py:\d+: @job\('celery_defaults"):
        job("celery_defaults.bad_queue", idempotency_key="payload", queue=queue)
