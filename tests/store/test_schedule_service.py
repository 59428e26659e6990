"""The schedule service (``django_jobs.engine.schedules``): each operation and each refusal.

The API, the admin, the CLI and the scheduler all go through it, so what is pinned here is
what every surface does: the checks of each field, who may schedule what (``by``), and what
``create``, ``update``, ``pause``, ``resume`` and ``delete`` write. Every refusal says what
to do next.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.engine import schedules
from django_jobs.engine.schedules import cron, undeclare
from django_jobs.exceptions import (
    InvalidPayload,
    InvalidSchedule,
    PayloadTooLarge,
    ScheduleNotAllowed,
)
from django_jobs.models import Schedule
from django_jobs.testing import fire_schedules

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
REPORT = {"name": "daily", "cron": "30 7 * * *", "tz": "Europe/Paris", "kind": "api.report"}
PAYLOAD = {"title": "t"}


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def refusal(exc: pytest.ExceptionInfo, field: str | None = None) -> str:
    if field is not None:
        assert exc.value.field == field
    return exc.value.message


# --- checks ---------------------------------------------------------------------------------


def test_each_field_check_names_its_field_and_what_to_do():
    assert schedules.check_cron("@daily") == "0 0 * * *"
    assert schedules.check_tz("Europe/Paris") == "Europe/Paris"
    assert schedules.check_catch_up("run-once") == "run-once"
    assert schedules.check_name("nightly") == "nightly"
    with pytest.raises(InvalidSchedule) as bad:
        schedules.check_cron("61 * * * *")
    assert "minute" in refusal(bad, "cron")
    with pytest.raises(InvalidSchedule) as bad:
        schedules.check_tz("Bogota")
    assert "Did you mean 'America/Bogota'" in refusal(bad, "tz")
    with pytest.raises(InvalidSchedule) as bad:
        schedules.check_catch_up("sometimes")
    assert "use one of 'skip', 'run-once', 'run-all'" in refusal(bad, "catch_up")
    with pytest.raises(InvalidSchedule) as bad:
        schedules.check_name("a\x07b")
    assert "control characters" in refusal(bad, "name")
    with pytest.raises(InvalidSchedule) as bad:
        schedules.check_name("x" * 201)
    assert "shorten it to 200" in refusal(bad, "name")
    with pytest.raises(InvalidSchedule) as bad:
        schedules.check_name("  ")
    assert "needs a name" in refusal(bad, "name")


@settings(max_examples=200, deadline=None)
@given(
    expr=st.lists(
        st.sampled_from(["*", "0", "5", "59", "61", "*/15", "1-5", "MON", "L", "?", "H", "1,2"]),
        min_size=0,
        max_size=7,
    ).map(" ".join)
    | st.text(max_size=30)
)
def test_a_cron_expression_is_normalized_or_refused_on_cron(expr):
    """Whatever the text: 5 fields (or 6, the second last) the cron engine fires on, or
    InvalidSchedule on "cron"."""
    try:
        normalized = schedules.check_cron(expr)
    except InvalidSchedule as exc:
        assert exc.field == "cron" and exc.message
        return
    assert len(normalized.split(" ")) in (5, 6)
    assert schedules.check_cron(normalized) == normalized
    assert cron.next_runs(normalized, "UTC", NOW, 1)


ZONES = sorted(zoneinfo.available_timezones() - {"localtime", "Factory", "posixrules"})
ZONES = [z for z in ZONES if not z.startswith(("posix/", "right/"))]


@settings(max_examples=150, deadline=None)
@given(
    tz=st.sampled_from(["Europe/Paris", "America/New_York", "Australia/Lord_Howe", *ZONES]),
    expr=st.sampled_from(["30 2 * * *", "0 1 * * *", "*/20 * * * *", "0 0 1 * *", "15 3 * * 0"]),
    after=st.datetimes(
        min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
    ),
)
def test_next_run_is_the_cron_engines_first_occurrence_across_dst(tz, expr, after):
    """In any zone, around any DST change: the next run is the first occurrence after
    ``after`` (none is skipped between them), aware UTC."""
    first = schedules.next_run(expr, tz, after)
    assert first is not None and first > after and first.tzinfo is UTC
    assert first == cron.next_runs(expr, tz, after, 1)[0]
    assert schedules.next_run(expr, tz, first - timedelta(microseconds=1)) == first
    halfway = after + (first - after) / 2
    assert schedules.next_run(expr, tz, halfway) == first


# --- who may schedule what ------------------------------------------------------------------


def test_a_member_schedules_a_schedulable_member_safe_kind_for_themselves(api_users, frozen):
    row = schedules.create(**REPORT, payload=PAYLOAD, owner=api_users.member, by=api_users.member)
    row.refresh_from_db()
    assert row.owner_id == api_users.member.pk and row.enabled
    assert row.synced_at == row.checked_until == NOW  # never fires for the past
    assert row.next_run_at == datetime(2026, 3, 3, 6, 30, tzinfo=UTC)  # 07:30 in Paris


def test_a_kind_a_member_may_not_schedule_and_an_unknown_one_are_one_refusal(api_users):
    messages = []
    for kind in ("demo.hello", "test.noop", "no.such.kind"):  # not schedulable, operator-only
        with pytest.raises(ScheduleNotAllowed) as refused:
            schedules.create(
                **{**REPORT, "kind": kind}, owner=api_users.member, by=api_users.member
            )
        messages.append(refused.value.message)
    assert messages == [schedules.KIND_NOT_ALLOWED] * 3
    assert "ask an operator" in messages[0]
    assert not Schedule.objects.exists()


def test_a_member_schedules_only_for_themselves(api_users):
    with pytest.raises(ScheduleNotAllowed) as refused:
        schedules.create(**REPORT, payload=PAYLOAD, owner=api_users.other, by=api_users.member)
    assert refused.value.message == schedules.NOT_YOURS
    operators = schedules.create(
        **REPORT, payload=PAYLOAD, owner=api_users.other, by=api_users.operator
    )
    assert operators.owner_id == api_users.other.pk


def test_the_trusted_caller_gets_the_known_kinds_for_an_unknown_one():
    with pytest.raises(InvalidSchedule) as bad:
        schedules.create(**{**REPORT, "kind": "no.such.kind"})
    assert "No job kind 'no.such.kind' is registered; pick one the code defines (" in refusal(
        bad, "kind"
    )
    assert "api.report" in bad.value.message


def test_the_payload_is_judged_as_admission_judges_it(settings):
    with pytest.raises(InvalidPayload) as bad:
        schedules.create(**REPORT, payload={"title": ""})
    assert "title" in bad.value.errors
    settings.JOBS = {**settings.JOBS, "MAX_PAYLOAD_BYTES": 100}
    with pytest.raises(PayloadTooLarge) as big:
        schedules.create(**REPORT, payload={"title": "x" * 200})
    assert big.value.message == (
        "The payload of 'api.report' is 212 bytes as JSON; the limit is 100 "
        '(JOBS["MAX_PAYLOAD_BYTES"]). Store large data elsewhere and pass a reference.'
    )
    assert not Schedule.objects.exists()


def test_a_name_is_unique_per_owner(api_users):
    schedules.create(**REPORT, payload=PAYLOAD, owner=api_users.member, by=api_users.member)
    schedules.create(**REPORT, payload=PAYLOAD, owner=api_users.other, by=api_users.other)
    with pytest.raises(InvalidSchedule) as taken:
        schedules.create(**REPORT, payload=PAYLOAD, owner=api_users.member, by=api_users.member)
    assert refusal(taken, "name") == "You already have a schedule with this name; pick another."
    with pytest.raises(InvalidSchedule) as taken:
        schedules.create(**REPORT, payload=PAYLOAD, owner=api_users.member)
    assert refusal(taken, "name") == (
        "Its owner already has a schedule with this name; pick another."
    )
    assert Schedule.objects.count() == 2


# --- update, pause, resume, delete ----------------------------------------------------------


@pytest.fixture
def members(api_users, frozen) -> Schedule:
    return schedules.create(**REPORT, payload=PAYLOAD, owner=api_users.member, by=api_users.member)


def test_retiming_moves_the_next_run_and_the_watermark(members, api_users, frozen):
    frozen.shift(timedelta(hours=1))
    schedules.update(members, {"cron": "@hourly", "tz": "UTC"}, by=api_users.member)
    row = Schedule.objects.get(pk=members.pk)
    assert (row.cron, row.tz) == ("0 * * * *", "UTC")
    assert row.next_run_at == NOW + timedelta(hours=2)
    assert row.checked_until == NOW + timedelta(hours=1)  # its old timing is not "missed"


def test_a_refused_update_changes_nothing(members, api_users):
    before = Schedule.objects.values().get(pk=members.pk)
    for changes, error in [
        ({"kind": "demo.hello"}, ScheduleNotAllowed),
        ({"payload": {"nope": 1}}, InvalidPayload),
        ({"cron": "0 0 30 2 *"}, InvalidSchedule),
        ({"enabled": "yes"}, InvalidSchedule),
    ]:
        with pytest.raises(error):
            schedules.update(members, changes, by=api_users.member)
        assert Schedule.objects.values().get(pk=members.pk) == before
    with pytest.raises(ValueError, match="no editable field"):
        schedules.update(members, {"declared": True})
    with pytest.raises(ScheduleNotAllowed) as refused:
        schedules.update(members, {"owner": api_users.other}, by=api_users.member)
    assert refused.value.message == schedules.NOT_YOURS
    with pytest.raises(ScheduleNotAllowed):
        schedules.update(members, {"enabled": False}, by=api_users.other)
    assert Schedule.objects.values().get(pk=members.pk) == before


def test_a_member_may_pause_what_they_may_no_longer_schedule(api_users):
    legacy = Schedule.objects.create(
        name="legacy", cron="0 3 * * *", tz="UTC", kind="test.noop", owner=api_users.member
    )
    schedules.update(legacy, {"enabled": False}, by=api_users.member)
    assert Schedule.objects.get(pk=legacy.pk).enabled is False
    with pytest.raises(ScheduleNotAllowed):
        schedules.resume(legacy, by=api_users.member)


def test_pause_and_resume(members, api_users, frozen):
    assert schedules.pause(members, reason="Paused: its owner's account is inactive.")
    row = Schedule.objects.get(pk=members.pk)
    assert (row.enabled, row.next_run_at) == (False, None)
    assert row.paused_reason == "Paused: its owner's account is inactive."
    assert schedules.pause(row) is False  # already paused: nothing written
    frozen.shift(timedelta(days=2))
    assert schedules.resume(row, by=api_users.member) is True
    row = Schedule.objects.get(pk=members.pk)
    assert (row.enabled, row.paused_reason) == (True, None)
    assert row.checked_until == NOW + timedelta(days=2)  # the paused days are not "missed"
    assert row.next_run_at == datetime(2026, 3, 5, 6, 30, tzinfo=UTC)
    assert schedules.resume(row) is False


def test_resuming_a_schedule_whose_kind_is_gone_is_refused(frozen):
    orphan = Schedule.objects.create(
        name="orphan", cron="0 3 * * *", tz="UTC", kind="gone.kind", enabled=False
    )
    with pytest.raises(InvalidSchedule) as bad:
        schedules.resume(orphan)
    assert "No job kind 'gone.kind' is registered" in refusal(bad, "kind")
    assert Schedule.objects.get(pk=orphan.pk).enabled is False


def test_delete_own_schedules_only(members, api_users):
    with pytest.raises(ScheduleNotAllowed):
        schedules.delete(members, by=api_users.other)
    schedules.delete(members, by=api_users.member)
    assert not Schedule.objects.exists()


def test_bulk_pause_and_delete_keep_declared_schedules(frozen):
    schedules.schedule("declared-one", cron="* * * * *", tz="UTC", job="test.noop")
    try:
        fire_schedules()
        schedules.create(name="runtime", cron="* * * * *", tz="UTC", kind="test.noop")
        assert schedules.pause_many(Schedule.objects.all()) == 2
        assert schedules.pause_many(Schedule.objects.all()) == 0
        assert schedules.delete_many(Schedule.objects.all()) == ["declared-one"]
        assert list(Schedule.objects.values_list("name", flat=True)) == ["declared-one"]
    finally:
        undeclare("declared-one")


def test_upcoming_is_empty_while_paused_and_refuses_a_row_that_no_longer_parses(members):
    assert schedules.upcoming(members, NOW, 2) == [
        datetime(2026, 3, 3, 6, 30, tzinfo=UTC),
        datetime(2026, 3, 4, 6, 30, tzinfo=UTC),
    ]
    schedules.pause(members)
    assert schedules.upcoming(members, NOW, 2) == []
    broken = Schedule(name="b", cron="61 * * * *", tz="UTC", kind="test.noop", enabled=True)
    with pytest.raises(InvalidSchedule):
        schedules.upcoming(broken, NOW, 1)
    assert schedules.next_run_or_none(broken.cron, broken.tz, NOW) is None


def test_owner_refusal_says_why_and_what_to_do(api_users):
    from django_jobs.kinds.registry import get

    assert schedules.owner_refusal(api_users.member, get("api.report")) is None
    assert "may no longer schedule 'test.noop'" in schedules.owner_refusal(
        api_users.member, get("test.noop")
    )
    api_users.member.is_active = False
    assert "inactive" in schedules.owner_refusal(api_users.member, get("api.report"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.text(max_size=50))
def test_a_declared_schedule_refuses_what_admission_would(payload):
    """Declared payloads are judged when declared: what admission refuses is refused here,
    as InvalidSchedule on "payload" (the declaration is what to fix)."""
    try:
        schedules.schedule("hyp", cron="0 3 * * *", tz="UTC", job="test.noop", payload=payload)
    except InvalidSchedule as exc:
        assert exc.field == "payload"
        with pytest.raises(InvalidPayload):
            schedules.check_payload(None, payload)
    finally:
        undeclare("hyp")


def test_an_operator_hands_a_schedule_to_another_owner(members, api_users):
    schedules.update(members, {"owner": api_users.other}, by=api_users.operator)
    assert Schedule.objects.get(pk=members.pk).owner_id == api_users.other.pk
    schedules.update(members, {"owner": None})
    assert Schedule.objects.get(pk=members.pk).owner_id is None
