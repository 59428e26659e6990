"""An open stream re-checks its user's role (SPEC §7, "And: ..."; docs/security.md).

A stream opened by an operator carries every job's events. Once that user is no longer an
operator, the stream stops within ``signin.RECHECK_EVERY`` seconds (SSE: a ``stream-error``
with ``"condition": "forbidden"``; WebSocket: close code 4403), and the stream the client opens
again carries only the user's own jobs' events. A real ASGI server (daphne), real clients.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from django_jobs.events.signin import RECHECK_EVERY
from django_jobs.kinds.registry import lookup
from tests.conftest import SSEClient, session_cookie
from tests.integration.test_events_live import WSClient
from tests.integration.test_events_security import closes_within, sse_ended, ws_ended

pytestmark = pytest.mark.process


def created(job):
    return lambda data: data["type"] == "job.created" and data["job"]["id"] == job.pk


def test_a_demoted_operators_streams_stop_carrying_other_users_events(
    asgi_server, django_user_model
):
    make = django_user_model.objects.create_user
    alice, olga = make("alice"), make("olga")
    operate = Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    olga.user_permissions.add(operate)
    server = asgi_server()
    bound = RECHECK_EVERY + 5  # the re-check interval, and slack for a busy machine
    cookie = session_cookie(olga)
    sse, ws = SSEClient(server.base, cookie=cookie), WSClient(server, cookie)
    try:
        assert sse.next()["event"] == "stream-open"
        hello = lookup("demo.hello")
        before = hello.as_user(alice, "before")  # an operator hears another user's job
        assert sse.job_events(until=created(before))[-1]["job"]["owner"] == alice.pk
        assert ws.job_events(until=created(before))[-1]["job"]["owner"] == alice.pk

        olga.user_permissions.remove(operate)  # demoted: the session stays signed in
        closes_within(sse_ended(sse), bound)
        assert sse.ended_with["condition"] == "forbidden"
        closes_within(ws_ended(ws), bound)
        assert ws.code == 4403
    finally:
        sse.close()
        ws.close()

    # Connected again, with the same session: the user's own events only.
    sse, ws = SSEClient(server.base, cookie=cookie), WSClient(server, cookie)
    try:
        assert sse.status == 200 and sse.next()["event"] == "stream-open"
        others = hello.as_user(alice, "after")
        own = hello.as_user(olga, "own")
        for heard in (sse.job_events(until=created(own)), ws.job_events(until=created(own))):
            assert {event["job"]["id"] for event in heard} == {own.pk}, heard
            assert others.pk not in {event["job"]["id"] for event in heard}
    finally:
        sse.close()
        ws.close()


@pytest.mark.django_db
def test_the_re_check_asks_for_the_role_the_stream_was_opened_with(django_user_model):
    from django_jobs.events.signin import NO_LONGER_OPERATOR, SIGNED_OUT, SignIn

    olga = django_user_model.objects.create_superuser("olga", password="pw")
    as_operator, as_member = SignIn(olga.pk, None, operator=True), SignIn(olga.pk, None)
    olga.is_staff = False  # not what makes an operator
    olga.save(update_fields=["is_staff"])
    assert as_operator.ended() is None
    olga.is_superuser = False
    olga.save(update_fields=["is_superuser"])
    assert as_operator.ended() == NO_LONGER_OPERATOR
    assert as_member.ended() is None  # a member's stream carries only their own events
    olga.is_active = False
    olga.save(update_fields=["is_active"])
    assert as_operator.ended() == as_member.ended() == SIGNED_OUT
