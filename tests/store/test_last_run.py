"""What a job keeps of its runs: the worker of its last run once it ends, and the attempt
numbering after an operator's retry. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

from django.test import TestCase

from django_jobs import Blocked, Retry, job, retry
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.testing import INLINE_WORKER, run_until_idle


class LastRunTests(TestCase):
    def define(self, kind, func, **options):
        self.addCleanup(unregister, kind)
        options.setdefault("idempotency_key", "payload")
        return job(kind, **options)(func)

    def test_an_ended_job_keeps_the_worker_of_its_last_run(self):
        ok = self.define("last.ok", lambda ctx: 1)
        bad = self.define("last.bad", _fail, retry=Retry(attempts=1))
        stop = self.define("last.blocked", _block)
        jobs = [ok.enqueue({"n": 1}), bad.enqueue({"n": 2}), stop.enqueue({"n": 3})]
        run_until_idle()
        rows = Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("id")
        assert [(r.state, r.worker_id, r.leased_until) for r in rows] == [
            ("succeeded", INLINE_WORKER, None),
            ("failed", INLINE_WORKER, None),
            ("blocked", INLINE_WORKER, None),
        ]

    def test_a_job_going_back_to_the_queue_holds_no_worker(self):
        flaky = self.define("last.flaky", _fail, retry=Retry(attempts=2, delay="1h"))
        queued = flaky.enqueue({"n": 4})
        run_until_idle()
        row = Job.objects.get(pk=queued.pk)
        assert (row.state, row.attempts, row.worker_id) == ("queued", 1, None)

    def test_after_an_operator_retry_the_attempts_count_on(self):
        """Pinned (docs/jobs.md): ``retry`` keeps ``attempts`` and grants the kind's attempts
        again on top of them, so ``ctx.attempt`` goes on from where it was and
        ``ctx.job.max_attempts`` grows by the kind's ``Retry.attempts``."""
        seen: list[tuple[int, int]] = []

        def runner(ctx):
            seen.append((ctx.attempt, ctx.job.max_attempts))
            if len(seen) < 4:
                raise RuntimeError(f"attempt {ctx.attempt} fails")
            return "done"

        kind = self.define("last.retried", runner, retry=Retry(attempts=2, delay=0, jitter=False))
        queued = kind.enqueue({"n": 5})
        run_until_idle()
        row = Job.objects.get(pk=queued.pk)
        assert (row.state, row.attempts, row.max_attempts) == ("failed", 2, 2)
        data = retry(queued.pk)
        assert (data["state"], data["attempts"], data["max_attempts"]) == ("queued", 2, 4)
        run_until_idle()
        row.refresh_from_db()
        assert seen == [(1, 2), (2, 2), (3, 4), (4, 4)]
        assert (row.state, row.attempts, row.max_attempts) == ("succeeded", 4, 4)


def _fail(ctx):
    raise RuntimeError("fails")


def _block(ctx):
    raise Blocked("needs a person")
