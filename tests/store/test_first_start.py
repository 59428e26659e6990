"""A job's first start is kept apart from its last (``started_at``: a retry's, a resume's), on
SQLite and PostgreSQL; the admin shows both. The clock is moved (time_machine), never slept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import time_machine
from django.contrib.auth import get_user_model
from django.test import TestCase

from django_jobs import Retry, job
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.testing import run_until_idle

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class FirstStartTests(TestCase):
    def setUp(self):
        self.traveller = time_machine.travel(T0, tick=False)
        self.clock = self.traveller.start()
        self.addCleanup(self.traveller.stop)
        self.calls = 0

        @job("first_start.flaky", idempotency_key="payload", retry=Retry(attempts=3, delay="1m"))
        def flaky(ctx):
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("the partner's API is down")
            return "done"

        self.flaky = flaky
        self.addCleanup(unregister, "first_start.flaky")

    def test_a_retried_job_keeps_its_first_start_while_the_last_moves(self):
        queued = self.flaky.enqueue({"order": 1})
        run_until_idle()
        first = Job.objects.get(pk=queued.pk)
        assert (first.state, first.first_started_at, first.started_at) == ("queued", T0, T0)
        self.clock.shift(timedelta(minutes=5))
        run_until_idle()
        done = Job.objects.get(pk=queued.pk)
        assert done.state == "succeeded" and done.attempts == 2
        assert done.first_started_at == T0
        assert done.started_at == T0 + timedelta(minutes=5)

        staff = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw")
        self.client.force_login(staff)
        page = self.client.get(f"/admin/django_jobs/job/{done.pk}/change/").content.decode()
        assert "First started" in page and "Last started" in page
        assert page.index("First started") < page.index("Last started")
