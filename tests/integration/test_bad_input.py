"""Bad input gets a 4xx and never a stored row that breaks a later read (SPEC §7).

Every door of admission (API, ``enqueue``, ``as_user``, schedules, ``emit``, the CLI) shares one
validation of stored JSON text: no NUL, no lone surrogate, at most 64 levels of nesting.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import InvalidPayload, emit, schedule
from django_jobs.engine.schedules import undeclare
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job, JobStep, Schedule
from django_jobs.testing import run_until_idle
from django_jobs.validation import MAX_DEPTH

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
LONE = "\ud800"
#: Every code point, surrogates and NUL included (hypothesis leaves surrogates out by default).
ANY_CHARACTER = st.characters(exclude_categories=())


@pytest.fixture
def member(api_users, api_client):
    return api_client(api_users.member)


@pytest.fixture
def other(api_users, api_client):
    return api_client(api_users.other)


@pytest.fixture
def operator(api_users, api_client):
    return api_client(api_users.operator)


def raw_post(client, path: str, text: str, **extra):
    """POST ``text`` as the JSON body, byte for byte (escapes such as \\ud800 kept)."""
    return client.generic("POST", path, text.encode(), content_type="application/json", **extra)


def nested(depth: int, leaf: object = 1) -> object:
    """``depth`` lists, one inside the other, around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def every_read_answers(clients, job_id: int | None = None) -> None:
    for client in clients:
        assert client.get("/api/jobs/").status_code == 200
        assert client.get("/api/jobs/schedules/").status_code == 200
        if job_id is not None:
            assert client.get(f"/api/jobs/{job_id}/").status_code in (200, 404)


# --- strings a database cannot hold -------------------------------------------------------


BAD_BODIES = [
    ('{"kind": "demo.hello", "payload": "\\ud800"}', "payload"),
    ('{"kind": "demo.hello", "payload": {"a": ["x\\udfff"]}}', "payload"),
    ('{"kind": "demo.hello", "payload": {"\\ud800": 1}}', "payload"),
    ('{"kind": "demo.hello", "payload": "nul\\u0000here"}', "payload"),
    ('{"kind": "demo.hello", "payload": {"k\\u0000": 1}}', "payload"),
    ('{"kind": "demo.hello", "payload": 1, "idempotency_key": "a\\u0000b"}', "idempotency_key"),
    ('{"kind": "demo.hello", "payload": 1, "idempotency_key": "a\\u0007b"}', "idempotency_key"),
    ('{"kind": "demo.hello", "payload": 1, "idempotency_key": "\\ud800"}', "idempotency_key"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_unstorable_strings_are_a_400_naming_the_field(member, other, operator, body, field):
    response = raw_post(member, "/api/jobs/", body)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert not Job.objects.exists()
    every_read_answers([member, other, operator])


@pytest.mark.parametrize("key", ["a\x01b", "tab\there", "del\x7f", "line\nbreak"])
def test_control_characters_in_the_idempotency_key_header_are_a_400(member, key):
    response = raw_post(
        member, "/api/jobs/", '{"kind": "demo.hello", "payload": 1}', HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 400, response.content
    assert "Idempotency-Key" in response.json()["errors"]
    assert not Job.objects.exists()


def test_a_schedule_with_unstorable_strings_is_a_400(member, other, operator):
    body = (
        '{"name": "n\\ud800", "cron": "0 3 * * *", "tz": "UTC", "kind": "api.report", '
        '"payload": {"title": "t"}}'
    )
    response = raw_post(member, "/api/jobs/schedules/", body)
    assert response.status_code == 400, response.content
    assert "name" in response.json()["errors"]
    payload = (
        '{"name": "ok", "cron": "0 3 * * *", "tz": "UTC", "kind": "api.report", '
        '"payload": {"title": "t\\ud800"}}'
    )
    response = raw_post(member, "/api/jobs/schedules/", payload)
    assert response.status_code == 400, response.content
    assert "payload" in response.json()["errors"]
    assert not Schedule.objects.exists()
    every_read_answers([member, other, operator])


# --- nesting -------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 950, 5000, 100_000])
def test_deep_nesting_is_a_400(member, operator, depth):
    body = '{"kind": "demo.hello", "payload": ' + "[" * depth + "]" * depth + "}"
    response = raw_post(operator, "/api/jobs/", body)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] in ("INVALID", "INVALID_PAYLOAD", "TOO_DEEP")
    assert not Job.objects.exists()


def test_nesting_up_to_the_limit_is_accepted_and_readable(member, api_users, admin_client):
    payload = nested(MAX_DEPTH)
    response = member.post("/api/jobs/", {"kind": "demo.hello", "payload": payload}, format="json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert member.get(f"/api/jobs/{job_id}/").json()["payload"] == payload
    assert admin_client.get(f"/admin/django_jobs/job/{job_id}/change/").status_code == 200


# --- unknown fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/jobs/", {"kind": "demo.hello", "payload": 1, "owner": 2, "max_attempts": 9}),
        (
            "/api/jobs/schedules/",
            {
                "name": "x",
                "cron": "0 3 * * *",
                "tz": "UTC",
                "kind": "api.report",
                "payload": {"title": "t"},
                "owner": 2,
                "max_attempts": 9,
            },
        ),
    ],
)
def test_unknown_body_fields_are_a_400_naming_them(member, path, body):
    response = member.post(path, body, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert {"owner", "max_attempts"} <= set(errors)
    assert not Job.objects.exists() and not Schedule.objects.exists()


def test_unknown_fields_on_a_schedule_patch_are_a_400(member):
    created = member.post(
        "/api/jobs/schedules/",
        {
            "name": "x",
            "cron": "0 3 * * *",
            "tz": "UTC",
            "kind": "api.report",
            "payload": {"title": "t"},
        },
        format="json",
    ).json()
    response = member.patch(
        f"/api/jobs/schedules/{created['id']}/", {"owner": 99, "enabled": False}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "owner" in response.json()["errors"]
    assert Schedule.objects.get().enabled is True


def test_unknown_fields_on_retry_are_a_400(operator, api_users):
    job = lookup("api.steps").as_user(api_users.member, {"fail": True})
    run_until_idle()
    response = operator.post(f"/api/jobs/{job.pk}/retry/", {"from_stepp": "x"}, format="json")
    assert response.status_code == 400, response.content
    assert "from_stepp" in response.json()["errors"]


# --- run_at and delay bounds ---------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        {"run_at": "9999-12-31T00:00:00Z"},
        {"run_at": "2040-01-01T00:00:00Z"},
        {"delay": "4000d"},
        {"delay": 10 * 366 * 86400 + 86400},
    ],
)
def test_absurd_run_at_or_delay_is_a_400(member, extra):
    with time_machine.travel(NOW, tick=False):
        response = member.post(
            "/api/jobs/", {"kind": "demo.hello", "payload": 1, **extra}, format="json"
        )
    assert response.status_code == 400, response.content
    assert set(extra) <= set(response.json()["errors"])
    assert "10 years" in json.dumps(response.json())
    assert not Job.objects.exists()


def test_run_at_within_the_bound_is_accepted(member):
    with time_machine.travel(NOW, tick=False):
        response = member.post(
            "/api/jobs/",
            {"kind": "demo.hello", "payload": 1, "run_at": "2035-01-01T00:00:00Z"},
            format="json",
        )
    assert response.status_code == 201, response.content


def test_python_enqueue_refuses_absurd_run_at(db):
    with time_machine.travel(NOW, tick=False), pytest.raises(ValueError, match="10 years"):
        lookup("demo.hello").enqueue(1, run_at=datetime(9999, 1, 1, tzinfo=UTC))
    with time_machine.travel(NOW, tick=False), pytest.raises(ValueError, match="10 years"):
        lookup("demo.hello").enqueue(2, delay=timedelta(days=5000))


# --- the Python doors share the validation -------------------------------------------------


BAD_VALUES = [
    LONE,
    {"k": "a\x00b"},
    {LONE: 1},
    {"a\x00": 1},
    ["ok", ["\udc00x"]],
    nested(MAX_DEPTH + 1),
]


@pytest.mark.parametrize("value", BAD_VALUES, ids=range(len(BAD_VALUES)))
def test_python_doors_raise_invalid_payload(db, api_users, value):
    hello = lookup("demo.hello")
    with pytest.raises(InvalidPayload, match=r"(NUL|surrogate|levels)"):
        hello.enqueue(value)
    with pytest.raises(InvalidPayload):
        hello.enqueue_many(["fine", value])
    with pytest.raises(InvalidPayload):
        hello.as_user(api_users.member, value)
    with pytest.raises(InvalidPayload):
        hello.enqueue("fine", idempotency_key="k\x00" if not isinstance(value, str) else value)
    with pytest.raises(InvalidPayload):
        emit("bad-input.event", value)
    assert not Job.objects.exists()


def test_declared_schedule_refuses_unstorable_payload():
    from django_jobs import InvalidSchedule

    with pytest.raises(InvalidSchedule, match="surrogate"):
        schedule("bad-input", cron="0 3 * * *", tz="UTC", job="demo.hello", payload={"a": LONE})
    undeclare("bad-input")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(ANY_CHARACTER),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(ANY_CHARACTER, max_size=5), children, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_anything_admitted_reads_back_equal(db, value):
    """Whatever text hypothesis draws (surrogates and NUL included): refused or stored intact."""
    try:
        job = lookup("demo.hello").enqueue(value, idempotency_key="h")
    except InvalidPayload:
        return
    try:
        assert Job.objects.get(pk=job.pk).payload == value
    finally:
        Job.objects.filter(pk=job.pk).delete()


# --- results, steps and log lines a runner produces ---------------------------------------


@pytest.mark.parametrize(
    "kind", ["bad_input.result_surrogate", "bad_input.result_nul", "bad_input.result_deep"]
)
def test_an_unstorable_result_fails_the_attempt(db, api_users, api_client, kind):
    job = lookup(kind).enqueue({})
    run_until_idle()
    job.refresh_from_db()
    assert job.state == "failed"
    assert "INVALID_RESULT" in job.error
    assert job.result is None
    assert api_client(api_users.operator).get(f"/api/jobs/{job.pk}/").status_code == 200


def test_an_unstorable_step_value_fails_the_attempt(db):
    job = lookup("bad_input.step_surrogate").enqueue({})
    run_until_idle()
    job.refresh_from_db()
    assert job.state == "failed"
    assert "InvalidResult: Step 'poison' returned a value that cannot be stored" in job.error
    assert not JobStep.objects.filter(job=job, state="completed").exists()


def test_log_lines_are_escaped_not_fatal(db, api_users, api_client):
    job = lookup("bad_input.log_surrogate").enqueue({})
    run_until_idle()
    job.refresh_from_db()
    assert job.state == "succeeded"
    assert job.log == ["lone \\ud800 and nul \\u0000 kept visible"]
    assert api_client(api_users.operator).get(f"/api/jobs/{job.pk}/").status_code == 200


# --- the Tasks backend and the CLI are doors too ------------------------------------------


def test_the_tasks_backend_refuses_unstorable_arguments(db):
    from testproject.tasks import add

    with pytest.raises(InvalidPayload, match="surrogate"):
        add.enqueue(LONE, "x")
    with pytest.raises(InvalidPayload, match="NUL"):
        add.enqueue(a="\x00", b=1)
    assert not Job.objects.exists()


def test_a_task_returning_unstorable_text_fails(db):
    from django_jobs.tasks.compat import TaskResultStatus
    from testproject.tasks import lone_surrogate

    result = lone_surrogate.enqueue()
    run_until_idle()
    failed = lone_surrogate.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert "surrogate" in failed.errors[0].traceback
    job = Job.objects.get()
    assert job.result is None


@pytest.mark.parametrize(
    ("payload", "said"),
    [('"\\ud800"', "surrogate"), ('{"a": "\\u0000"}', "NUL"), ("[" * 5000 + "]" * 5000, "deep")],
)
def test_the_cli_refuses_unstorable_payloads(db, payload, said):
    import io

    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=said) as info:
        call_command("jobs", "enqueue", "demo.hello", "--payload", payload, stdout=io.StringIO())
    assert info.value.returncode == 2
    assert not Job.objects.exists()


def test_the_schema_says_request_bodies_take_no_other_fields(api_client):
    schema = api_client().get("/api/jobs/schema/", {"format": "json"}).json()
    bodies = schema["components"]["schemas"]
    for name in ("SubmitRequest", "RetryRequest", "ScheduleRequest", "PatchedScheduleRequest"):
        assert bodies[name]["additionalProperties"] is False, name


def test_error_messages_and_reasons_are_stored_escaped(db, api_users, api_client):
    failed = lookup("bad_input.raise_bad_text").enqueue({})
    waiting = lookup("bad_input.requeue_bad_text").enqueue({})
    run_until_idle()
    failed.refresh_from_db()
    waiting.refresh_from_db()
    assert failed.state == "failed"
    assert "RuntimeError: lone \\ud800 and nul \\u0000 in a message" in failed.error
    assert waiting.state == "waiting"
    assert waiting.wait_reason == "waiting on \\u0000\\ud800"
    operator = api_client(api_users.operator)
    for job in (failed, waiting):
        assert operator.get(f"/api/jobs/{job.pk}/").status_code == 200
