"""Live events in one process: the JSON, the addresses, the rows, replay, retention, refusals.

The rows are written by the ``job_event`` receiver. Inside a test's transaction (``db``) a row
is written at once on that transaction; outside one (``transactional_db``) the writer thread
stores it, and ``writer.flush()`` waits for that. Real servers and workers are in
``test_events_live.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from datetime import UTC, timedelta
from unittest.mock import ANY

import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import RequestFactory, override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import django_jobs
from django_jobs.engine.rows.publish import EventWriter, Published, publish
from django_jobs.events import prune_events
from django_jobs.events.checks import check_live_events
from django_jobs.events.fanout import send_sse, ws_messages
from django_jobs.events.listeners import Listener, listeners
from django_jobs.events.outbox import writer
from django_jobs.events.payloads import (
    OPERATORS_CHANNEL,
    OPERATORS_GROUP,
    JobFollow,
    channel_for_user,
    encode,
    event_data,
    event_text,
    group_for_user,
    member_text,
    sse_channels,
    ws_groups,
)
from django_jobs.events.relay import relay
from django_jobs.events.sse import (
    EVENT_ID,
    InvalidStreamRequest,
    JobEventStorage,
    JobsChannelManager,
    last_event_id,
    stream_query,
)
from django_jobs.events.streams import current_id, replay
from django_jobs.models import Job, JobEventRecord
from django_jobs.serialize import TRACEBACK_MARKER, View, job_json, json_instant, public_error
from django_jobs.signals import EVENT_TYPES
from django_jobs.states import JobState
from django_jobs.store.event_rows import StoredEvent
from django_jobs.testing import run_until_idle
from testproject.jobs import always_fail, hello, record

JOB_KEYS = set(job_json(Job(kind="x"), payload=False))


def rows_of(job: Job) -> list[JobEventRecord]:
    return list(JobEventRecord.objects.filter(job_id=job.pk).order_by("id"))


def data_of(row: JobEventRecord) -> dict:
    return json.loads(row.data)


def needs_file_database() -> None:
    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite" and ("mode=memory" in name or name in ("", ":memory:")):
        pytest.skip("a second connection needs a file or server database (SQLITE_TEST_PATH)")


# -- the JSON -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_runs_events_carry_the_job_without_payload_or_result(
    api_users, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        job = hello.as_user(api_users.member, "events")
    publish("job.log", job, line="a line")
    run_until_idle()

    rows = rows_of(job)
    # The runner's own log line and progress are published as a worker publishes them.
    assert [r.type for r in rows] == [
        "job.created",
        "job.log",
        "job.started",
        "job.log",
        "job.progress",
        "job.succeeded",
    ]
    for row in rows:
        data = data_of(row)
        assert data["type"] == row.type
        assert set(data) == (
            {"type", "job", "at", "line"} if row.type == "job.log" else {"type", "job", "at"}
        )
        assert set(data["job"]) == JOB_KEYS  # no payload, no result
        assert data["job"]["id"] == job.pk
        assert data["job"]["owner"] == api_users.member.pk
        assert row.owner == str(api_users.member.pk)
    assert data_of(rows[1])["line"] == "a line"
    assert data_of(rows[3])["line"] == "hello events"
    assert data_of(rows[4])["job"]["progress"] == {"stage": "done", "percent": 100}
    states = [data_of(r)["job"]["state"] for r in rows]
    assert states == ["queued", "queued", "running", "running", "running", "succeeded"]
    succeeded = data_of(rows[-1])
    assert succeeded["job"]["progress"] == {"stage": "done", "percent": 100}
    assert succeeded["at"] == rows[-1].created_at.isoformat()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
instants = st.none() | st.datetimes(
    timezones=st.sampled_from([UTC, timezone.get_fixed_timezone(90)])
)


errors_with_tracebacks = st.builds(
    lambda head, tail: f"{head}{TRACEBACK_MARKER}{tail}", st.text(), st.text()
)


@settings(max_examples=300, deadline=None)
@given(
    event_type=st.sampled_from(EVENT_TYPES),
    state=st.sampled_from([*JobState.values, JobState.RUNNING]),
    fields=st.fixed_dictionaries(
        {
            "id": st.integers(1, 2**62),
            "kind": st.text(),
            "queue": st.text(),
            "owner_id": st.none() | st.integers(1, 2**62),
            "tenant": st.none() | st.text(),
            "priority": st.integers(-32768, 32767),
            "attempts": st.integers(0, 100),
            "max_attempts": st.integers(1, 100),
            "error": st.none() | st.text() | errors_with_tracebacks,
            "wait_reason": st.none() | st.text(),
            "run_at": instants,
            "created_at": instants,
            "started_at": instants,
            "ended_at": instants,
            "timestamps_derived": st.booleans(),
            "idempotency_key": st.none() | st.text(),
            "engine": st.text(),
            "parent_id": st.none() | st.integers(1, 2**62),
            # A worker's name may hold what the member's text cuts out by its text.
            "worker_id": st.none()
            | st.builds(
                lambda name: f"{name}:default:t",
                st.text() | st.sampled_from([',"worker":"x"', '"}', "\\"]),
            ),
        }
    ),
    progress=st.none()
    | st.fixed_dictionaries({}, optional={"stage": json_values, "percent": json_values}),
    at=st.datetimes(timezones=st.just(UTC)),
    line=st.none() | st.text(),
)
def test_the_fast_event_text_is_the_encoded_event(event_type, state, fields, progress, at, line):
    job = Job(state=state, progress=progress, **fields)
    text = event_text(event_type, job, at, line)
    assert text == encode(event_data(event_type, job, at, line))
    # The member's text, derived from the stored one, is the member view of the same event.
    member = encode(event_data(event_type, job, at, line, view=View.MEMBER))
    assert member_text(text) == member
    assert TRACEBACK_MARKER not in (json.loads(member)["job"]["error"] or "")
    # Which worker runs it is the operators' to know: a member's text has no such key.
    assert "worker" not in json.loads(member)["job"]
    assert ("worker" in json.loads(text)["job"]) and (
        (json.loads(text)["job"]["worker"] is not None)
        == (state == JobState.RUNNING and bool(fields["worker_id"]))
    )


@settings(max_examples=300)
@given(
    instants=st.lists(
        st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones()), min_size=1, max_size=5
    )
)
def test_an_instants_text_is_its_isoformat_each_time(instants):
    # Twice: the second is the kept text (by identity); an equal instant of another zone, or a
    # copy, gets its own.
    for value in [*instants, *instants, *(v.replace() for v in instants)]:
        assert json_instant(value) == f'"{value.isoformat()}"'


@pytest.mark.django_db
def test_retrying_failed_and_cancelled_events(api_users, django_capture_on_commit_callbacks):
    failing = always_fail.enqueue({"n": 1})
    run_until_idle()  # attempt 1 of 3 fails: queued again for its retry
    assert [r.type for r in rows_of(failing)] == ["job.started", "job.retrying"]
    assert data_of(rows_of(failing)[-1])["job"]["state"] == "queued"

    for hours in (1, 2):  # attempts 2 and 3 fail, each after its delay: a dead letter
        with time_machine.travel(timezone.now() + timedelta(hours=hours), tick=False):
            run_until_idle()
    types = [r.type for r in rows_of(failing)]
    assert types[-1] == "job.failed"
    assert data_of(rows_of(failing)[-1])["job"]["error"].startswith("MAX_ATTEMPTS")

    queued = record.enqueue({"n": "cancel me"})
    with django_capture_on_commit_callbacks(execute=True):
        django_jobs.cancel(queued.pk)
    assert [r.type for r in rows_of(queued)] == ["job.cancelled"]
    assert data_of(rows_of(queued)[0])["job"]["state"] == "cancelled"
    assert rows_of(queued)[0].owner is None


def test_the_event_types_are_the_spec_s():
    assert EVENT_TYPES == (
        "job.created",
        "job.started",
        "job.progress",
        "job.log",
        "job.waiting",
        "job.succeeded",
        "job.failed",
        "job.blocked",
        "job.cancelled",
        "job.retrying",
    )


# -- addresses ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_event_reaches_its_owner_and_operators_and_an_ownerless_one_operators_only(api_users):
    member, other, operator = api_users.member, api_users.other, api_users.operator
    mine = f"jobs-user-{member.pk}"
    assert sse_channels(str(member.pk)) == [OPERATORS_CHANNEL, mine]
    assert sse_channels(None) == [OPERATORS_CHANNEL]
    assert ws_groups(str(member.pk)) == [OPERATORS_GROUP, f"django_jobs.user.{member.pk}"]
    assert ws_groups(None) == [OPERATORS_GROUP]

    # Each user listens on one address; operators' carries every event.
    assert channel_for_user(member) == mine
    assert channel_for_user(operator) == OPERATORS_CHANNEL
    assert channel_for_user(api_users.superuser) == OPERATORS_CHANNEL
    assert channel_for_user(api_users.staff) == f"jobs-user-{api_users.staff.pk}"
    assert group_for_user(member) == f"django_jobs.user.{member.pk}"
    assert group_for_user(operator) == OPERATORS_GROUP

    # A project that names our channel manager for its own eventstream views: the job
    # channels are never served there (our stream serves them), other channels as before.
    manager = JobsChannelManager()
    for user in (member, other, operator, None):
        assert not manager.can_read_channel(user, mine)
        assert not manager.can_read_channel(user, OPERATORS_CHANNEL)
    assert manager.can_read_channel(None, "someone-elses-channel")  # not ours: eventstream's


@pytest.mark.django_db
@override_settings(JOBS={"IS_OPERATOR": "tests.integration.test_events.is_named_boss"})
def test_the_operator_test_is_jobs_is_operator(api_users, django_user_model):
    boss = django_user_model.objects.create_user("boss")
    assert channel_for_user(boss) == OPERATORS_CHANNEL
    assert channel_for_user(api_users.operator) == f"jobs-user-{api_users.operator.pk}"


def is_named_boss(user) -> bool:
    return user.username == "boss"


# -- replay from the rows -------------------------------------------------------------------


def frames(body: str) -> list[dict]:
    """The events of an SSE body: ``event``, ``id`` and ``data`` of each."""
    found = []
    for block in body.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            if name in ("event", "id", "data"):
                fields[name] = fields.get(name, "") + value
        if fields:
            found.append(fields)
    return found


@pytest.mark.django_db
def test_replay_after_an_id_gives_each_channel_its_own_events(
    api_users, django_capture_on_commit_callbacks
):
    member, other = api_users.member, api_users.other
    with django_capture_on_commit_callbacks(execute=True):
        a = hello.as_user(member, "a")
        b = hello.as_user(other, "b")
        nobody = hello.enqueue("nobody")
    run_until_idle()
    everything = list(JobEventRecord.objects.order_by("id"))
    upto = current_id()
    assert upto == everything[-1].pk

    def read(channel: str, last_id: int = 0) -> list[tuple[int, int]]:
        return [
            (int(f["id"].rpartition(":")[2]), json.loads(f["data"])["job"]["id"])
            for f in frames(replay(channel, last_id, upto).body)
        ]

    assert read(f"jobs-user-{member.pk}") == [(r.pk, a.pk) for r in rows_of(a)]
    assert read(f"jobs-user-{other.pk}") == [(r.pk, b.pk) for r in rows_of(b)]
    assert read(OPERATORS_CHANNEL) == [(r.pk, r.job_id) for r in everything]
    assert {job for _, job in read(OPERATORS_CHANNEL)} == {a.pk, b.pk, nobody.pk}
    # After an id: only what came later.
    middle = everything[4].pk
    assert read(OPERATORS_CHANNEL, middle) == [(r.pk, r.job_id) for r in everything[5:]]
    # An event is the row's text with the channel's id, as sent live.
    first = frames(replay(OPERATORS_CHANNEL, 0, upto).body)[0]
    assert first == {
        "event": everything[0].type,
        "id": f"{OPERATORS_CHANNEL}:{everything[0].pk}",
        "data": everything[0].data,
    }


@pytest.mark.django_db
def test_a_pruned_last_event_id_resets_the_stream_and_retention_prunes_old_rows(
    api_users, settings
):
    member = api_users.member
    channel = f"jobs-user-{member.pk}"
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        old = hello.as_user(member, "old")
        run_until_idle()
    with time_machine.travel(start + timedelta(hours=23), tick=False):
        recent = hello.as_user(member, "recent")
        run_until_idle()
    old_ids = [r.pk for r in rows_of(old)]
    with time_machine.travel(start + timedelta(hours=25), tick=False):
        assert prune_events() == len(old_ids)  # default retention: one day
    # started, the log line, the progress, succeeded
    assert rows_of(old) == [] and len(rows_of(recent)) == 4

    upto = current_id()
    pruned = replay(channel, old_ids[0], upto)
    assert frames(pruned.body) == [
        {
            "event": "stream-reset",
            "id": f"{channel}:{upto}",
            "data": f'{{"channels": ["{channel}"]}}',
        }
    ]
    assert pruned.last_id == rows_of(recent)[-1].pk
    # The newest id of the channel is still a good place to resume from.
    resumed = frames(replay(channel, rows_of(recent)[0].pk, upto).body)
    assert [f["id"] for f in resumed] == [f"{channel}:{r.pk}" for r in rows_of(recent)[1:]]

    settings.JOBS = {**settings.JOBS, "EVENT_RETENTION": "1h"}
    with time_machine.travel(start + timedelta(hours=25), tick=False):
        assert prune_events() == 4
    settings.JOBS = {**settings.JOBS, "EVENT_RETENTION": None}
    assert prune_events() == 0  # keep everything
    assert prune_events(older_than="0s") == 0


@pytest.mark.django_db
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.integers(0, 3600), min_size=0, max_size=40),
    gone=st.sets(st.integers(0, 39)),
    cutoff=st.integers(-10, 40 * 3600),
)
def test_pruning_deletes_exactly_the_events_made_before_the_cutoff(steps, gone, cutoff):
    """Ids follow creation; pruning finds the boundary by bisection, whatever gaps the ids
    have (rows deleted before, sequence gaps)."""
    from django_jobs.store.events import prune

    JobEventRecord.objects.all().delete()
    start = timezone.now()
    at, made = start, []
    for step in steps:
        at += timedelta(seconds=step)
        made.append(JobEventRecord(type="job.log", job_id=1, data="{}", created_at=at))
    rows = JobEventRecord.objects.bulk_create(made)
    JobEventRecord.objects.filter(pk__in=[r.pk for i, r in enumerate(rows) if i in gone]).delete()
    kept = [r for i, r in enumerate(rows) if i not in gone]
    boundary = start + timedelta(seconds=cutoff)
    old = [r.pk for r in kept if r.created_at < boundary]
    assert prune(connection.alias, boundary, batch_size=7) == len(old)
    left = list(JobEventRecord.objects.order_by("id").values_list("id", flat=True))
    assert left == [r.pk for r in kept if r.created_at >= boundary]


@pytest.mark.django_db
def test_a_delivered_row_reaches_each_channel_with_its_row_id_and_its_readers_text(api_users):
    failing = always_fail.as_user(api_users.member, {"n": 1})
    failing.max_attempts = 1
    failing.save()
    run_until_idle()
    row = rows_of(failing)[-1]
    assert row.type == "job.failed" and TRACEBACK_MARKER in data_of(row)["job"]["error"]
    stored = StoredEvent(row.pk, row.type, row.job_id, row.owner, row.data)
    mine = f"jobs-user-{api_users.member.pk}"
    loop = asyncio.new_event_loop()
    mine_listener, operators_listener = Listener(mine, loop), Listener(OPERATORS_CHANNEL, loop)
    for listener in (mine_listener, operators_listener):
        listeners.add(listener)
    try:
        send_sse([stored])
    finally:
        for listener in (mine_listener, operators_listener):
            listeners.remove(listener)
        loop.close()
    # Operators get the stored text; the owner the same event without the traceback (and
    # without the operators' ``worker`` and ``worker_pid``).
    assert operators_listener.pending == [(row.pk, "job.failed", row.data)]
    ((event_id, event_type, text),) = mine_listener.pending
    assert (event_id, event_type) == (row.pk, "job.failed")
    owner_view = json.loads(text)
    assert owner_view["job"]["error"] == public_error(data_of(row)["job"]["error"])
    assert "Traceback" not in text and "testproject/jobs.py" not in text
    operators_job = {
        key: value
        for key, value in data_of(row)["job"].items()
        if key not in ("worker", "worker_pid")
    }
    assert owner_view == {**data_of(row), "job": {**operators_job, "error": ANY}}
    assert ws_messages([stored]) == [
        (OPERATORS_GROUP, {"type": "jobs.event", "text": row.data, "job": failing.pk}),
        (
            f"django_jobs.user.{api_users.member.pk}",
            {"type": "jobs.event", "text": text, "job": failing.pk},
        ),
    ]

    # A project naming our storage class for its own eventstream channels gets eventstream's
    # DjangoModelStorage.
    storage = JobEventStorage()
    first = storage.append_event("news", "message", '"hello"')
    second = storage.append_event("news", "message", '"again"')
    assert [e.id for e in storage.get_events("news", first.id)] == [second.id]


# -- refusals -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_anonymous_clients_are_refused(client):
    from channels.testing import WebsocketCommunicator

    from testproject.asgi import application

    response = client.get("/api/jobs/events/")
    assert response.status_code == 401
    assert response.json()["code"] == "NOT_AUTHENTICATED"
    assert response["WWW-Authenticate"]

    async def handshake():
        communicator = WebsocketCommunicator(application, "/ws/jobs/")
        connected, code = await communicator.connect()
        await communicator.disconnect()
        return connected, code

    connected, _ = async_to_sync(handshake)()
    assert connected is False


@pytest.mark.django_db
def test_refused_basic_credentials_are_a_401(client, api_users):
    import base64

    token = base64.b64encode(b"member:wrong").decode()
    response = client.get("/api/jobs/events/", HTTP_AUTHORIZATION=f"Basic {token}")
    assert response.status_code == 401
    response = client.post("/api/jobs/events/")
    assert response.status_code == 405


# -- the writer thread and the relay (real commits: a second connection) -------------------


@pytest.mark.django_db(transaction=True)
def test_a_broken_event_store_never_fails_a_job_and_events_follow_once_it_is_back(caplog):
    """The table is renamed away: the job succeeds, a warning is logged, and once the table
    is back the writer stores what it kept."""
    needs_file_database()
    table = JobEventRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        with caplog.at_level(logging.WARNING, logger="django_jobs.events"):
            job = record.enqueue({"n": "events away"})
            ran = run_until_idle()
            assert [j.state for j in ran] == ["succeeded"]
            assert not writer.flush(timeout=0.5)  # kept in memory, not stored
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
    assert "Cannot store" in caplog.text
    assert writer.flush(timeout=10)
    assert [r.type for r in rows_of(job)] == ["job.created", "job.started", "job.succeeded"]


@pytest.mark.django_db(transaction=True)
def test_a_writer_thread_the_system_refuses_keeps_the_events_for_the_next_submit(
    monkeypatch, caplog
):
    """Out of memory for a thread's stack (``can't start new thread``): publishing does not
    raise (it would fail the job being started), and the next submit starts the writer and
    stores everything kept."""
    needs_file_database()
    job = record.enqueue({"n": "no thread"})
    own = EventWriter()
    start = threading.Thread.start
    refusals = iter([RuntimeError("can't start new thread")])

    def start_or_refuse(thread):
        refusal = next(refusals, None)
        if refusal is not None and thread.name == "django_jobs-events-writer":
            raise refusal
        return start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_or_refuse)
    with caplog.at_level(logging.ERROR, logger="django_jobs.events"):
        own.submit_all([Published("job.started", job, timezone.now(), None)])
    assert "Cannot start the events writer thread" in caplog.text
    assert not own.flush(timeout=0.2)  # kept, not stored
    own.submit_all([Published("job.succeeded", job, timezone.now(), None)])
    assert own.flush(timeout=10)
    types = [r.type for r in rows_of(job)]
    assert types[-2:] == ["job.started", "job.succeeded"]


@pytest.mark.django_db(transaction=True)
def test_the_relay_delivers_new_rows_to_listeners_in_order(api_users):
    needs_file_database()
    member = api_users.member
    channel = f"jobs-user-{member.pk}"
    loop = asyncio.new_event_loop()
    listener = Listener(channel, loop)
    relay.ensure_started()
    listeners.add(listener)
    try:
        job = hello.as_user(member, "relayed")
        run_until_idle()
        assert writer.flush(timeout=10)
        expected = [r.pk for r in rows_of(job)]

        def delivered():
            with listeners.lock:
                return [event_id for event_id, _, _ in listener.pending]

        from tests.conftest import wait_until

        wait_until(lambda: delivered() == expected, timeout=10)
        assert current_id() >= expected[-1]
    finally:
        listeners.remove(listener)
        relay.stop()
        loop.close()


# -- configuration --------------------------------------------------------------------------


def test_the_system_checks_name_what_to_set(settings):
    assert check_live_events() == []
    # No EVENTSTREAM_* setting is needed: without them, nothing to warn about.
    del settings.EVENTSTREAM_STORAGE_CLASS
    del settings.EVENTSTREAM_CHANNELMANAGER_CLASS
    assert check_live_events() == []
    settings.JOBS = {"EVENT_RETENTION": "a while"}
    assert [m.id for m in check_live_events()] == ["django_jobs.E201"]


# -- what the stream reads --------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    name=st.text(min_size=1, max_size=20).filter(lambda n: n not in ("lastEventId", "job")),
    value=st.text(max_size=20),
)
def test_any_query_parameter_but_last_event_id_and_job_is_refused_by_name(name, value):
    request = RequestFactory().get("/api/jobs/events/", {name: value})
    if set(request.GET) == set():  # a name the query string cannot carry
        return
    with pytest.raises(InvalidStreamRequest) as refused:
        last_event_id(request)
    assert set(refused.value.errors) == set(request.GET)


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.text(max_size=20), st.integers().map(str)))
def test_a_job_to_follow_is_a_job_id_or_a_400_naming_job(value):
    request = RequestFactory().get("/api/jobs/events/", {"job": value})
    try:
        after, job = stream_query(request)
    except InvalidStreamRequest as refused:
        assert list(refused.errors) == ["job"]
        assert not (value.isascii() and value.isdigit() and value[0] != "0" and len(value) < 19)
    else:
        assert after is None
        assert job == int(value) and job > 0 and str(job) == value


@settings(max_examples=300, deadline=None)
@given(header=st.text(max_size=40))
def test_a_last_event_id_is_an_id_the_stream_sent_or_a_400(header):
    request = RequestFactory().get("/api/jobs/events/", HTTP_LAST_EVENT_ID=header)
    try:
        found = last_event_id(request)
    except InvalidStreamRequest as refused:
        assert list(refused.errors) == ["Last-Event-ID"]
        assert EVENT_ID.fullmatch(header) is None
    else:
        if header:
            assert EVENT_ID.fullmatch(header) is not None
            assert found == int(header.rpartition(":")[2])
        else:
            assert found is None


@pytest.mark.parametrize(
    ("header", "query", "expected"),
    [
        ("jobs-user-7:1532", {}, 1532),
        ("jobs-operators:9", {}, 9),
        ("", {"lastEventId": "jobs-user-7:4"}, 4),
        ("jobs-user-7:5", {"lastEventId": "jobs-user-7:4"}, 5),  # the header wins
        ("", {}, None),
    ],
)
def test_the_documented_ids(rf, header, query, expected):
    request = rf.get("/api/jobs/events/", query, HTTP_LAST_EVENT_ID=header)
    assert last_event_id(request) == expected


@pytest.mark.django_db
def test_a_bad_stream_request_is_a_400_saying_what_is_read(client, api_users):
    client.force_login(api_users.member)
    response = client.get("/api/jobs/events/?es-meta=x.y.z&recover=true")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "INVALID_STREAM_REQUEST"
    assert set(body["errors"]) == {"es-meta", "recover"}
    response = client.get("/api/jobs/events/", HTTP_LAST_EVENT_ID="jobs-user-1:abc")
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"Last-Event-ID"}


@pytest.mark.django_db
def test_the_projects_own_eventstream_views_never_hear_a_job_channel(api_users, settings):
    """A project with its own eventstream views, their default channel manager (anyone reads
    any channel) and eventstream's storage: asking them for a job channel gives nothing."""
    from django_eventstream.eventrequest import EventRequest
    from django_eventstream.eventstream import get_events
    from django_eventstream.views import Listener as EventstreamListener
    from django_eventstream.views import get_listener_manager

    settings.EVENTSTREAM_CHANNELMANAGER_CLASS = (
        "django_eventstream.channelmanager.DefaultChannelManager"
    )
    settings.EVENTSTREAM_STORAGE_CLASS = "django_eventstream.storage.DjangoModelStorage"
    channels = [OPERATORS_CHANNEL, f"jobs-user-{api_users.member.pk}"]
    spy = EventstreamListener()
    spy.loop = asyncio.new_event_loop()
    spy.channels = set(channels)
    get_listener_manager().add_listener(spy)
    try:
        job = hello.as_user(api_users.member, "private")
        run_until_idle()
        rows = rows_of(job)
        assert rows
        send_sse([StoredEvent(r.pk, r.type, r.job_id, r.owner, r.data) for r in rows])
    finally:
        get_listener_manager().remove_listener(spy)
        spy.loop.close()
    assert spy.channel_items == {}
    request = RequestFactory().get("/project/events/", {"lastEventId": f"{channels[0]}:0"})
    request.user = api_users.other
    found = get_events(EventRequest(request, view_kwargs={"channels": channels}))
    assert all(items == [] for items in found.channel_items.values())


@pytest.mark.django_db
def test_a_job_follow_takes_the_jobs_and_its_childrens_events_only():
    parent = Job.objects.create(kind="test.noop", state="waiting")
    child = Job.objects.create(kind="test.noop", state="queued", parent=parent)
    cousin = Job.objects.create(kind="test.noop", state="queued", parent_id=None)
    # A job whose parent's id starts with the followed id's digits is not a child.
    lookalike_parent = Job.objects.create(kind="test.noop", pk=int(f"{parent.pk}7"))
    lookalike = Job.objects.create(kind="test.noop", parent=lookalike_parent)
    now = timezone.now()
    follow = JobFollow(parent.pk)
    text = {j.pk: event_text("job.created", j, now) for j in (parent, child, cousin, lookalike)}
    assert follow.wants(parent.pk, text[parent.pk])
    assert follow.wants(child.pk, text[child.pk])
    assert child.pk in follow.ids  # known from now on without parsing
    assert not follow.wants(cousin.pk, text[cousin.pk])
    assert not follow.wants(lookalike.pk, text[lookalike.pk])
    # A log line quoting the marker is text inside a string: its quotes are escaped.
    line = event_text("job.log", cousin, now, line=f'"parent":{parent.pk}')
    assert not follow.wants(cousin.pk, line)
