"""Text that jobs carry never acts on the terminal: ``manage.py jobs`` and the worker's log.

A key, a log line, an error, a reason, a kind, a payload, a step or a schedule may hold escape
sequences (a fake ``state  succeeded`` line, a cleared screen). The human output prints them
escaped (``\\x1b``) and its only raw newlines are its own; ``--json`` stays JSON that parses to
the stored text.
"""

from __future__ import annotations

import json
import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import Retry, job
from django_jobs.cli import render
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job, JobStep, Schedule
from django_jobs.printable import printable, printable_json
from django_jobs.testing import run_until_idle

# Characters a terminal acts on, or that cannot be printed: C0 (but the layout's newline), DEL,
# C1, the line/paragraph separators, the bidirectional controls, lone surrogates.
UNSAFE = {
    *(chr(c) for c in range(0x20)),
    *(chr(c) for c in range(0x7F, 0xA0)),
    "\u2028",
    "\u2029",
    "\u200e",
    "\u200f",
    *(chr(c) for c in range(0x202A, 0x202F)),
    *(chr(c) for c in range(0x2066, 0x206A)),
} - {"\n"}

NASTY = ["\x1b[2J", "\x1b]0;owned\x07", "\n  state            succeeded", "\r", "\x9b31m", "\x7f"]
NASTY += ["\u202e", "\u2028", "\t", "\x0b", "\x1c", "\x85", "\x00"]


def unsafe_in(text: str) -> list[str]:
    return sorted({c for c in text if c in UNSAFE or 0xD800 <= ord(c) <= 0xDFFF})


def texts(*, storable: bool) -> st.SearchStrategy[str]:
    """Any text, weighted towards escape sequences; ``storable``: what a database keeps."""
    if storable:  # PostgreSQL refuses NUL; no driver encodes a lone surrogate
        chars = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
        pieces = st.sampled_from([p for p in NASTY if "\x00" not in p]) | chars
        # Within the narrowest column it is stored in (Schedule.tz, 64 characters): PostgreSQL
        # refuses longer text, which is no escaping matter.
        return st.lists(pieces, max_size=8).map("".join).map(lambda text: text[:64])
    chars = st.characters(exclude_categories=())
    pieces = st.sampled_from(NASTY) | chars
    return st.lists(pieces, max_size=8).map("".join)


def jobs(*args: object) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("jobs", *[str(a) for a in args], stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def assert_safe(output: str) -> None:
    assert unsafe_in(output) == [], output


# --- the renderers, on any text (no database: surrogates and NUL included) -------------------


def detail(text: str) -> dict:
    iso = "2026-03-01T12:00:00+00:00"
    return {
        "id": 7,
        "kind": text,
        "queue": text,
        "engine": text,
        "state": "failed",
        "owner": None,
        "tenant": text,
        "priority": 0,
        "attempts": 1,
        "max_attempts": 1,
        "progress": {"stage": text, "percent": 40},
        "error": f"{text}\nTraceback:\n{text}",
        "wait_reason": text,
        "run_at": iso,
        "created_at": iso,
        "started_at": iso,
        "ended_at": iso,
        "timestamps_derived": False,
        "idempotency_key": text,
        "payload": {text: text},
        "result": [text],
        "steps": [
            {
                "name": text,
                "state": "failed",
                "attempts": 1,
                "started_at": iso,
                "ended_at": iso,
                "error": text,
            }
        ],
        "log": [text, text],
    }


@settings(max_examples=300)
@given(texts(storable=False))
def test_renderers_escape_every_control_character(text):
    from datetime import datetime

    now = datetime.fromisoformat("2026-03-01T12:05:00+00:00")
    row = detail(text)
    page = render.render_job(row, now)
    assert_safe(page)
    lines = page.split("\n")
    # One line per field: no text starts a line of its own, so none can fake one.
    assert [line for line in lines if line.startswith("  state ")] == ["  state            failed"]
    assert f"  idempotency key  {printable(text)}" in lines
    # Below the log's heading: its two lines, then one per line of the error, each indented.
    error_lines = len(row["error"].rstrip("\n").split("\n"))
    tail = lines[lines.index("Log (last 2 lines):") + 1 :]
    assert sum(line.startswith("  ") for line in tail) == 2 + error_lines

    table = render.render_jobs([row, row], now)
    assert_safe(table)
    assert len(table.split("\n")) == 3

    kinds = render.render_kinds(
        [
            {
                "kind": text,
                "label": text,
                "group": text,
                "engine": text,
                "queue": text,
                "concurrency": 1,
                "retry": {"attempts": 1},
                "member_safe": True,
                "schedulable": False,
            }
        ]
    )
    assert_safe(kinds)
    assert len(kinds.split("\n")) == 2

    schedules = render.render_schedules(
        [
            {
                "name": text,
                "cron": text,
                "tz": text,
                "kind": text,
                "enabled": True,
                "last_fired_at": None,
                "next_runs": [],
                "error": text,
            }
        ],
        now,
    )
    assert_safe(schedules)
    assert len(schedules.split("\n")) == 2

    stats = render.render_stats(
        {
            "queues": [{"queue": text, "states": {"queued": 1}, "oldest_due_age_s": 3.0}],
            "pickup_latency_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0, "sample": 3},
        }
    )
    assert_safe(stats)


@settings(max_examples=300)
@given(st.recursive(texts(storable=False), lambda inner: st.lists(inner, max_size=3)))
def test_json_output_has_no_raw_control_character_and_parses_back(value):
    document = printable_json(json.dumps({"v": value}, indent=2, ensure_ascii=False))
    assert_safe(document)
    assert json.loads(document) == {"v": value}


# --- the commands, on stored rows -------------------------------------------------------------


def store_rows(text: str) -> tuple[Job, Job]:
    failed = Job.objects.create(
        kind=text,
        queue=text,
        state="failed",
        tenant=text,
        attempts=1,
        max_attempts=1,
        payload={"k": text},
        result=None,
        error=f"RuntimeError: {text}\n\nTraceback (most recent call last):\n  {text}",
        log=[text, f"second {text}"],
        progress={"stage": text, "percent": 50},
        idempotency_key=text,
    )
    JobStep.objects.create(job=failed, name=text, state="failed", error=text, attempts=1)
    waiting = Job.objects.create(
        kind=text, state="waiting", wait_reason=text, idempotency_key=f"w{text}"
    )
    Schedule.objects.create(name=text, cron=text, tz=text, kind=text, payload={"k": text})
    return failed, waiting


@pytest.mark.django_db
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(texts(storable=True))
def test_commands_print_stored_text_escaped(text):
    Job.objects.all().delete()
    Schedule.objects.all().delete()
    failed, waiting = store_rows(text)

    page, _ = jobs("inspect", failed.pk)
    assert_safe(page)
    assert [line for line in page.split("\n") if line.startswith("  state ")] == [
        "  state            failed"
    ]
    assert f"  idempotency key  {printable(text)}" in page.split("\n")

    for args in (["list"], ["schedules"], ["stats"], ["inspect", waiting.pk]):
        out, err = jobs(*args)
        assert_safe(out + err)
    listed, _ = jobs("list")
    assert len(listed.rstrip("\n").split("\n")) == 3  # the header and one line per job

    with pytest.raises(CommandError) as refusal:  # the message lists the job's step names
        jobs("retry", failed.pk, "--from-step", "no such step")
    assert_safe(str(refusal.value))

    out, _ = jobs("retry", failed.pk)
    assert_safe(out)
    out, _ = jobs("cancel", waiting.pk)
    assert_safe(out)

    document, _ = jobs("inspect", failed.pk, "--json")
    assert_safe(document)
    parsed = json.loads(document)
    assert parsed["idempotency_key"] == text
    assert parsed["log"] == [text, f"second {text}"]
    assert parsed["steps"][0]["name"] == text


@pytest.mark.django_db
def test_drain_progress_and_enqueue_messages_are_escaped():
    kind = "cli.\x1b[2Jnasty"

    @job(kind, idempotency_key="payload", retry=Retry(attempts=1))
    def nasty(ctx):
        return None

    try:
        # A queue name is stored text: control characters in it are refused, in escaped words.
        with pytest.raises(CommandError) as refused:
            jobs("enqueue", kind, "--queue", "q\x1b[31m")
        assert_safe(str(refused.value))
        out, err = jobs("enqueue", kind, "--queue", "q")
        assert_safe(out)
        assert "\\x1b[2J" in out
        out, err = jobs("drain", "--queue", "q")
        assert_safe(out + err)
        assert "ran 1/32" in err and "cli.\\x1b[2Jnasty" in err
    finally:
        unregister(kind)


# --- the worker's log -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_failed_attempt_is_logged_with_its_text_escaped(caplog):
    @job("cli.log\x1b]0;x\x07", idempotency_key="payload", retry=Retry(attempts=1))
    def fails(ctx):
        raise RuntimeError("\x1b[2J\nINFO fake line\u202e")

    try:
        fails.enqueue({"n": 1})
        with caplog.at_level(logging.INFO, logger="django_jobs"):
            [ran] = run_until_idle()
        assert ran.state == "failed"
        [record] = [r for r in caplog.records if "attempt 1 failed" in r.getMessage()]
        text = record.getMessage()
        assert record.exc_info is None
        assert_safe(text)
        assert "\\x1b[2J\\nINFO fake line\\u202e" in text
        assert "cli.log\\x1b]0;x\\x07" in text
        assert "Traceback (most recent call last):\n" in text  # the traceback's own lines
    finally:
        unregister("cli.log\x1b]0;x\x07")
