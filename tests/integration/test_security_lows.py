"""The smaller findings of a security review (SPEC §7, "And: ..."; docs/security.md).

``retry`` spends the member's rate; a flow or a schedule naming an unknown kind, or enqueue
options a job cannot take, is a 400 at admission (never a 500, never a job that fails later);
the demo's submit button is throttled like the API's submit; management commands refuse
abbreviated options.
"""

from __future__ import annotations

import base64
import json

import pytest
from django.core.management import CommandError
from django.test import Client

from django_jobs import operations
from django_jobs.kinds.registry import lookup
from django_jobs.management.commands.jobs import Command as JobsCommand
from django_jobs.management.commands.runjobs import Command as RunjobsCommand
from django_jobs.models import Job, Schedule


def basic(username: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


MEMBER = basic("member", "pw-member")
OPERATOR = basic("operator", "pw-operator")


def post(client: Client, path: str, body: object, credentials: dict[str, str]):
    return client.post(path, json.dumps(body), content_type="application/json", **credentials)


def test_a_members_retries_spend_the_member_rate(api_users, settings):
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": "3/h"}
    client = Client()
    made = post(client, "/api/jobs/", {"kind": "demo.hello", "payload": "r"}, MEMBER)
    assert made.status_code == 201
    job_id = made.json()["id"]
    for expected in (200, 200, 429):
        operations.cancel(job_id)
        answer = post(client, f"/api/jobs/{job_id}/retry/", {}, MEMBER)
        assert answer.status_code == expected, answer.content
    assert answer.json()["code"] == "THROTTLED" and int(answer["Retry-After"]) > 0
    # Operators are not throttled.
    for _ in range(5):
        assert post(client, f"/api/jobs/{job_id}/retry/", {}, OPERATOR).status_code == 200
        operations.cancel(job_id)


FLOW = "django_jobs.flow"
BAD_CANVASES = [
    {"kind": "no.such.kind", "payload": {}},
    {"chain": [{"kind": "demo.hello", "payload": "a"}, {"kind": "no.such.kind", "payload": {}}]},
    {"kind": "demo.hello", "payload": "x", "options": {"queue": 5}},
    {"kind": "demo.hello", "payload": "x", "options": {"queue": "bad\u0001queue"}},
    {"kind": "demo.hello", "payload": "x", "options": {"priority": "high"}},
    {"kind": "demo.hello", "payload": "x", "options": {"priority": 10**9}},
    {"kind": "demo.hello", "payload": "x", "options": {"delay": "bogus"}},
    {"kind": "demo.hello", "payload": "x", "options": {"run_at": "tomorrow"}},
    {"kind": "demo.hello", "payload": "x", "options": {"expires": "never"}},
    {"kind": "demo.hello", "payload": "x", "options": {"idempotency_key": 5}},
]


@pytest.mark.parametrize("canvas", BAD_CANVASES)
def test_a_flow_naming_an_unknown_kind_or_bad_options_is_a_400_at_admission(api_users, canvas):
    client = Client(raise_request_exception=False)
    submitted = post(client, "/api/jobs/", {"kind": FLOW, "payload": canvas}, OPERATOR)
    assert submitted.status_code == 400, submitted.content
    assert submitted.json()["code"] == "INVALID_PAYLOAD"
    body = {"name": "f", "every": "1h", "kind": FLOW, "payload": canvas}
    scheduled = post(client, "/api/jobs/schedules/", body, OPERATOR)
    assert scheduled.status_code == 400, scheduled.content
    assert "payload" in scheduled.json()["errors"]
    assert Job.objects.count() == Schedule.objects.count() == 0


def test_an_operators_schedule_of_an_unknown_kind_is_a_400_naming_the_kinds(api_users):
    client = Client()
    body = {"name": "n", "every": "1h", "kind": "no.such.kind", "payload": {}}
    refused = post(client, "/api/jobs/schedules/", body, OPERATOR)
    assert refused.status_code == 400, refused.content
    assert "demo.hello" in json.dumps(refused.json()["errors"]["kind"])
    # A member still learns nothing: the same 403 as a kind they may not schedule.
    assert post(client, "/api/jobs/schedules/", body, MEMBER).status_code == 403
    good = {"name": "g", "every": "1h", "kind": FLOW, "payload": {"kind": "demo.hello"}}
    assert post(client, "/api/jobs/schedules/", good, OPERATOR).status_code == 201


def test_the_demos_submit_button_spends_the_member_rate(api_users, settings):
    settings.JOBS = {**settings.JOBS, "MEMBER_RATE": "2/h"}
    client = Client()
    client.force_login(api_users.member)
    statuses = [
        client.post("/demo/submit/", "{}", content_type="application/json").status_code
        for _ in range(3)
    ]
    assert statuses == [201, 201, 429]
    # The same budget as the API's submits.
    api = post(Client(), "/api/jobs/", {"kind": "demo.hello", "payload": "x"}, MEMBER)
    assert api.status_code == 429
    operator = Client()
    operator.force_login(api_users.operator)
    for _ in range(3):
        assert (
            operator.post("/demo/submit/", "{}", content_type="application/json").status_code == 201
        )


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (JobsCommand, ["list", "--sett=x"]),
        (JobsCommand, ["list", "--sta", "failed"]),
        (JobsCommand, ["--sett=x", "list"]),
        (JobsCommand, ["list", "--lim", "5"]),
        (RunjobsCommand, ["--conc", "2"]),
        (RunjobsCommand, ["--eng", "default"]),
        (RunjobsCommand, ["--no-sched"]),
    ],
)
def test_commands_refuse_abbreviated_options(command, argv):
    parser = command().create_parser("manage.py", command.__module__.rsplit(".", 1)[-1])
    with pytest.raises(CommandError, match="unrecognized arguments"):
        parser.parse_args(argv)


def test_commands_read_options_written_whole():
    jobs = JobsCommand().create_parser("manage.py", "jobs")
    parsed = jobs.parse_args(["list", "--state", "failed", "--limit", "5"])
    assert (parsed.state, parsed.limit) == ("failed", 5)
    runjobs = RunjobsCommand().create_parser("manage.py", "runjobs")
    assert runjobs.parse_args(["--concurrency", "2"]).concurrency == 2


def test_a_flow_with_good_options_is_still_admitted(api_users):
    canvas = {"kind": "demo.hello", "payload": "x", "options": {"queue": "q", "delay": 5}}
    answer = post(Client(), "/api/jobs/", {"kind": FLOW, "payload": canvas}, OPERATOR)
    assert answer.status_code == 201, answer.content
    assert lookup(FLOW).kind == FLOW
