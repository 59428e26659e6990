"""Searching jobs (SPEC §18): by a payload field, error text, a time range and a worker, in the
API, the admin's job list and ``jobs list``; one parser behind the three (``django_jobs.search``).

Every filter narrows what the caller may see: a member's search never returns another member's
job. A malformed filter is a 400 naming it (API), a 400 page naming it (admin), a
``CommandError`` naming the option (CLI), never a 500.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.models import Job
from django_jobs.search import (
    MAX_DEPTH,
    InvalidFilter,
    JobSearch,
    parse_payload_path,
    payload_values,
    search_from_options,
    search_from_query,
    search_from_words,
)
from django_jobs.serialize import TRACEBACK_MARKER
from tests.integration.test_api_documented import OPERATOR, basic

NOW = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
MEMBER = basic("member", "pw-member")
OTHER = basic("other", "pw-other")


@pytest.fixture
def rows(api_users):
    """Jobs of two members and of nobody, with payloads, errors, ages and workers."""

    def make(name: str, **fields) -> Job:
        fields.setdefault("kind", "demo.hello")
        fields.setdefault("created_at", NOW - timedelta(minutes=5))
        fields.setdefault("run_at", fields["created_at"])
        return Job.objects.create(idempotency_key=name, **fields)

    return {
        "int": make("int", owner=api_users.member, payload={"user": 42, "tag": "a"}),
        "text": make("text", owner=api_users.member, payload={"user": "42"}),
        "nested": make(
            "nested",
            owner=api_users.member,
            payload={"user": {"id": 7, "name": "ada"}, "files": ["x.txt", "y.txt"]},
            created_at=NOW - timedelta(days=3),
        ),
        "flags": make("flags", owner=api_users.member, payload={"on": True, "off": None}),
        "timeout": make(
            "timeout",
            owner=api_users.member,
            state="failed",
            payload={"user": 1},
            error=f"TimeoutError: the API timed out{TRACEBACK_MARKER}\n  File /srv/secret.py",
            created_at=NOW - timedelta(hours=2),
            worker_id="w1:default:0a1b2c3d",
        ),
        "hidden": make(
            "hidden",
            owner=api_users.member,
            state="failed",
            error=f"ValueError: bad row{TRACEBACK_MARKER}\n  File /srv/timeout_helpers.py",
            worker_id="host:123:default:ffff0000",
        ),
        "other": make(
            "other",
            owner=api_users.other,
            state="running",
            payload={"user": 42, "tag": "a"},
            error="TimeoutError: theirs",
            worker_id="w1:default:12345678",
        ),
        "colon": make("colon", worker_id="w1:x:default:abcdef01"),
        "nobody": make("nobody", payload={"user": 42}, created_at=NOW - timedelta(days=30)),
    }


def ids(answer, rows) -> set[str]:
    assert answer.status_code == 200, answer.content
    by_id = {job.pk: name for name, job in rows.items()}
    return {by_id[row["id"]] for row in answer.json()["results"]}


def api(query: str, who=OPERATOR):
    with time_machine.travel(NOW, tick=False):
        return Client().get(f"/api/jobs/?{query}", **who)


# -- the API --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("payload.user=42", {"int", "text", "other", "nobody"}),
        ('payload.user="42"', {"text"}),
        ("payload.user.id=7", {"nested"}),
        ("payload.user.name=ada", {"nested"}),
        ("payload.files.1=y.txt", {"nested"}),
        ("payload.on=true", {"flags"}),
        ("payload.off=null", {"flags"}),
        ("payload.user=42&payload.tag=a", {"int", "other"}),
        ("payload.user=43", set()),
        ("payload.user=123456789012345678901234567890", set()),  # past any integer column
        ("payload.user=-0.0e-999", set()),
        ("payload.user=1e999", set()),  # no JSON number holds it: as text
        ("payload.contains=42", set()),  # a key, not Django's lookup of that name
        ("payload.user__id=42", set()),
        ("error=TIMEOUT", {"timeout", "hidden", "other"}),  # the traceback too, for operators
        ("error=timed%20out", {"timeout"}),
        ("error=100%25", set()),  # % and _ are text, not wildcards
        ("created_after=1h", {"int", "text", "flags", "hidden", "other", "colon"}),
        ("created_after=2026-12-07T05:30:00%2B00:00&created_before=1h", {"timeout"}),
        ("created_before=2026-12-05", {"nested", "nobody"}),
        ("created_before=2026-12-04T09:00:00%2B01:00", {"nobody"}),
        (
            "created_after=2026-12-04T07:59:00",
            {"nested", "int", "text", "flags", "timeout"} | {"hidden", "other", "colon"},
        ),
        ("worker=w1", {"timeout", "other"}),
        ("worker=w1:x", {"colon"}),
        ("worker=host:123", {"hidden"}),
        ("payload.user=42&state=running&worker=w1", {"other"}),
    ],
)
def test_the_api_searches_for_operators(rows, query, expected):
    assert ids(api(query), rows) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("payload.user=42", {"int", "text"}),
        ("payload.tag=a", {"int"}),
        ("error=timeout", {"timeout"}),  # not "hidden": its traceback is not theirs to search
        ("error=secret", set()),
        ("created_after=1h", {"int", "text", "flags", "hidden"}),
    ],
)
def test_a_member_searches_their_own_jobs_only(rows, query, expected):
    assert ids(api(query, MEMBER), rows) == expected
    other = ids(api(query, OTHER), rows)
    assert other <= {"other"}


def test_a_member_may_not_search_by_worker(rows):
    answer = api("worker=w1", MEMBER)
    assert answer.status_code == 403
    assert answer.json()["code"] == "OPERATOR_ONLY_FILTER"
    assert "worker" in answer.json()["errors"]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("payload.=1", "payload."),
        ("payload=1", "payload"),
        ("payload.a..b=1", "payload.a..b"),
        ("payload.a%20b=1", "payload.a b"),
        ("payload.-1=1", "payload.-1"),
        ("payload.1st=1", "payload.1st"),
        ("payload." + ".".join(["a"] * (MAX_DEPTH + 1)) + "=1", "payload." + ".".join(["a"] * 9)),
        ("payload.user=", "payload.user"),
        ("payload.user=%00", "payload.user"),
        ("payload.user=%22a%5C%22", "payload.user"),
        ("payload.user=1&payload.user=2", "payload.user"),
        ("error=", "error"),
        ("error=%20%20", "error"),
        ("error=a%00b", "error"),
        ("error=" + "x" * 501, "error"),
        ("created_after=yesterday", "created_after"),
        ("created_after=2026-13-01", "created_after"),
        ("created_after=9999-12-31T23:59:59-01:00", "created_after"),
        ("created_before=99999999999999d", "created_before"),
        ("created_before=1h&created_after=30m", "created_before"),
        ("worker=", "worker"),
        ("worker=w%1b1", "worker"),
        ("state=nope&error=", "error"),
    ],
)
def test_a_malformed_filter_is_a_400_naming_it(rows, query, named):
    answer = api(query)
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["code"] == "INVALID"
    assert named in body["errors"], body
    assert all(isinstance(t, str) and t for t in body["errors"][named])


def test_unknown_parameters_are_still_ignored(rows):
    # As before the search: the list ignores parameters it does not read.
    assert ids(api("payloadx=1&colour=red&payload.user=7"), rows) == set()
    assert len(ids(api("colour=red"), rows)) == len(rows)


def test_the_schema_documents_the_search(api_users):
    schema = Client().get("/api/jobs/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/jobs/"]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert {"error", "created_after", "created_before", "worker"} <= names
    assert "payload.<path>" in operation["description"]
    assert "403" in operation["responses"]


# -- the parser ------------------------------------------------------------------------------


def test_payload_values():
    assert payload_values("42", name="p") == (42, "42")
    assert payload_values("-1.5e3", name="p") == (-1500.0, "-1.5e3")
    assert payload_values("true", name="p") == (True, "true")
    assert payload_values("null", name="p") == (None, "null")
    assert payload_values('"42"', name="p") == ("42",)
    assert payload_values('""', name="p") == ("",)
    assert payload_values("1e999", name="p") == ("1e999",)
    assert payload_values("NaN", name="p") == ("NaN",)
    assert payload_values("ada lovelace", name="p") == ("ada lovelace",)
    assert parse_payload_path("user.id", name="p") == ("user", "id")
    assert parse_payload_path("files.0", name="p") == ("files", "0")


def test_the_admin_words_and_the_cli_options_parse_alike():
    with time_machine.travel(NOW, tick=False):
        query = search_from_query(
            {"payload.user": ["42"], "error": ["time out"], "created_after": ["1h"]}
        )
        words, rest = search_from_words('payload.user=42 error:"time out" since:1h #12 report')
        options = search_from_options(payload=["user=42"], error="time out", since="1h")
    assert query == words == options
    assert rest == "#12 report"
    assert query.created_after == NOW - timedelta(hours=1)
    with pytest.raises(InvalidFilter) as caught:
        search_from_words('error:"open')
    assert "search" in caught.value.errors
    assert not JobSearch()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.text(max_size=60), value=st.text(max_size=60))
def test_any_parameter_parses_or_names_itself(name, value):
    try:
        search_from_query({f"payload.{name}": [value], "error": [value], "created_after": [value]})
    except InvalidFilter as exc:
        assert exc.errors
        assert set(exc.errors) <= {f"payload.{name}", "error", "created_after"}
        assert all(exc.errors.values())


PATH_TEXT = st.text(alphabet=st.sampled_from("ab_-0.9Z$ é\x00"), max_size=30)
VALUE_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["1", "-0", "1.5", "1e400", "true", "null", '"x"', '"\\u0000"', "1e-400"]),
)


@pytest.mark.django_db
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=PATH_TEXT, value=VALUE_TEXT)
def test_any_payload_filter_parses_or_names_itself_and_never_breaks_a_query(api_users, path, value):
    # Through the API on the real database: a 200 or a 400 naming the parameter, never a 500.
    from urllib.parse import urlencode

    answer = Client().get("/api/jobs/?" + urlencode({f"payload.{path}": value}), **OPERATOR)
    assert answer.status_code in (200, 400), answer.content
    if answer.status_code == 400:
        assert f"payload.{path}" in answer.json()["errors"]


# -- the admin -------------------------------------------------------------------------------


def admin(client: Client, q: str):
    with time_machine.travel(NOW, tick=False):
        return client.get("/admin/django_jobs/job/", {"q": q})


def listed(answer, rows) -> set[str]:
    assert answer.status_code == 200, answer.content
    shown = {job.pk for job in answer.context["cl"].result_list}
    return {name for name, job in rows.items() if job.pk in shown}


@pytest.fixture
def operator_client(api_users):
    client = Client()
    api_users.operator.is_staff = True
    api_users.operator.save()
    client.force_login(api_users.operator)
    return client


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ("payload.user=42", {"int", "text", "other", "nobody"}),
        ('payload.user="42"', {"text"}),
        ("payload.user.id=7", {"nested"}),
        ("error:timeout", {"timeout", "hidden", "other"}),
        ('error:"timed out"', {"timeout"}),
        ("since:1h", {"int", "text", "flags", "hidden", "other", "colon"}),
        ("since:2026-12-07T05:30:00+00:00 until:1h", {"timeout"}),
        ("worker:w1", {"timeout", "other"}),
        ("payload.user=42 worker:w1", {"other"}),
        ("payload.tag=a other", {"other"}),  # a plain word: the owner's name, as before
    ],
)
def test_the_admin_search_box(rows, operator_client, q, expected):
    assert listed(admin(operator_client, q), rows) == expected


@pytest.mark.parametrize(
    ("q", "named"),
    [
        ("payload.a..b=1", "payload.a..b"),
        ("payload.user=", "payload.user"),
        ("error:", "error"),
        ("since:yesterday", "since"),
        ("until:1h since:30m", "until"),
        ("since:1h since:2h", "since"),
        ("created_after:soon", "created_after"),
        ("worker:", "worker"),
        ('error:"open', "search"),
    ],
)
def test_a_malformed_admin_search_is_a_400_naming_it(rows, operator_client, q, named):
    answer = admin(operator_client, q)
    assert answer.status_code == 400
    said = [str(m) for m in answer.context["messages"]]
    assert any(m.startswith(f"Search: {named}: ") for m in said), said
    assert f"Search: {named}: " in answer.content.decode()
    assert list(answer.context["cl"].result_list) == []


# -- jobs list -------------------------------------------------------------------------------


def jobs_list(*args: str) -> list[int]:
    out = io.StringIO()
    with time_machine.travel(NOW, tick=False):
        call_command("jobs", "list", "--json", *args, stdout=out)
    return [row["id"] for row in json.loads(out.getvalue())]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--payload", "user=42"], {"int", "text", "other", "nobody"}),
        (["--payload", "payload.user=42", "--payload", "tag=a"], {"int", "other"}),
        (["--payload", "user.id=7"], {"nested"}),
        (["--error", "timed out"], {"timeout"}),
        (["--since", "1h"], {"int", "text", "flags", "hidden", "other", "colon"}),
        (["--since", "2026-12-07T05:30:00+00:00", "--until", "1h"], {"timeout"}),
        (["--worker", "w1"], {"timeout", "other"}),
        (["--worker", "w1", "--state", "running"], {"other"}),
    ],
)
def test_jobs_list_searches(rows, args, expected):
    by_id = {job.pk: name for name, job in rows.items()}
    assert {by_id[i] for i in jobs_list(*args)} == expected


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--payload", "user"], "--payload"),
        (["--payload", "a..b=1"], "--payload"),
        (["--payload", "user="], "--payload"),
        (["--error", ""], "--error"),
        (["--since", "yesterday"], "--since"),
        (["--until", "2026-13-01"], "--until"),
        (["--worker", "w\x1b1"], "--worker"),
    ],
)
def test_a_malformed_option_is_a_command_error_naming_it(rows, args, named):
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("jobs", "list", "--json", *args, stdout=out)
    assert caught.value.returncode == 2
    error = json.loads(out.getvalue())["error"]
    assert error["code"] == "INVALID_FILTER" and named in error["message"]
    with pytest.raises(CommandError, match=named.replace("-", r"\-")):
        call_command("jobs", "list", *args, stdout=io.StringIO())


def test_the_job_list_is_wired_for_live_updates(rows, operator_client):
    # The list follows the event stream (admin_live.js), swapping the rows inside #djj-results;
    # never a <meta> refresh. A refused search stays put with its messages.
    page = admin(operator_client, "payload.user=42").content.decode()
    assert 'src="/static/django_jobs/admin_live.js"' in page
    assert 'data-events="/api/jobs/events/"' in page
    assert 'id="djj-results" data-djj-live="results"' in page
    assert 'id="djj-live-status"' in page
    assert "http-equiv" not in page
    refused = admin(operator_client, "since:yesterday").content.decode()
    assert "admin_live.js" not in refused


@given(text=st.text(alphabet=st.sampled_from("ab_-09.é$ \x00"), max_size=40))
def test_a_payload_path_parses_to_its_keys_or_names_the_parameter(text):
    try:
        keys = parse_payload_path(text, name="payload.x")
    except InvalidFilter as exc:
        assert list(exc.errors) == ["payload.x"] and exc.errors["payload.x"]
    else:
        assert ".".join(keys) == text and 1 <= len(keys) <= MAX_DEPTH
