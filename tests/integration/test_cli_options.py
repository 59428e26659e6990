"""``manage.py jobs``: Django's common options after the command, JSON errors, bounded limits.

Parsing is checked in-process on every command; ``--settings`` and ``--pythonpath`` matter
before Django loads the settings, so real ``manage.py`` processes check those (started together,
so the test takes the time of one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given, settings
from hypothesis import strategies as st

from django_jobs.cli import EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_REFUSED
from django_jobs.management.commands.jobs import Command
from django_jobs.models import Job
from testproject.jobs import record
from tests.conftest import ROOT

MAX_LIMIT = 1000  # SPEC §7: CLI and MCP limits are bounded, 1..1000

#: Each command with the arguments it needs.
COMMANDS: dict[str, list[str]] = {
    "list": [],
    "inspect": ["7"],
    "retry": ["7"],
    "cancel": ["7"],
    "resolve": ["7", "--step", "pay", "--as", "failed"],
    "drain": [],
    "stats": [],
    "kinds": [],
    "schedules": [],
    "wake": [],
    "prune": [],
    "mcp": [],
    "enqueue": ["test.record"],
    "workers": [],
    "queues": [],
    "pause": ["default"],
    "resume": ["default"],
}

#: Django's common options, and what each sets.
COMMON: list[tuple[list[str], dict[str, Any]]] = [
    (["--settings", "site.settings"], {"settings": "site.settings"}),
    (["--settings=site.settings"], {"settings": "site.settings"}),
    (["--pythonpath", "/srv/site"], {"pythonpath": "/srv/site"}),
    (["-v", "2"], {"verbosity": 2}),
    (["--verbosity=0"], {"verbosity": 0}),
    (["--traceback"], {"traceback": True}),
    (["--no-color"], {"no_color": True}),
    (["--force-color"], {"force_color": True}),
    (["--skip-checks"], {"skip_checks": True}),
]

DEFAULTS = {
    "settings": None,
    "pythonpath": None,
    "verbosity": 1,
    "traceback": False,
    "no_color": False,
    "force_color": False,
    "skip_checks": False,
}


PARSER = Command().create_parser("manage.py", "jobs")


def parse(*args: str) -> dict[str, Any]:
    return vars(PARSER.parse_args(list(args)))


def test_every_command_takes_the_common_options_after_it():
    assert set(COMMANDS) == set(PARSER._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for name, needed in COMMANDS.items():
        for option, sets in COMMON:
            options = parse(name, *needed, *option)
            assert options["command"] == name
            assert {k: options[k] for k in DEFAULTS} == {**DEFAULTS, **sets}, (name, option)
            # Before the command they still work, and one before is not undone after it.
            before = parse(*option, name, *needed)
            assert {k: before[k] for k in DEFAULTS} == {**DEFAULTS, **sets}, (name, option)
        assert parse("-v", "0", name, *needed, "--traceback")["verbosity"] == 0
        assert parse("-v", "0", name, *needed, "-v", "3")["verbosity"] == 3


@pytest.mark.django_db
def test_the_common_options_act_after_the_command():
    out, err = StringIO(), StringIO()
    record.enqueue({"n": 1})
    call_command("jobs", "drain", "-v", "0", "--skip-checks", "--no-color", stdout=out, stderr=err)
    assert err.getvalue() == ""  # -v 0: no progress lines
    assert "Ran 1 job(s): 1 succeeded." in out.getvalue()
    with pytest.raises(CommandError, match="can't be used together"):
        call_command("jobs", "kinds", "--no-color", "--force-color")


def manage(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "jobs", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,  # the MCP server ends when its input does
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.process
def test_settings_and_pythonpath_after_the_command_choose_the_settings(worker_env, tmp_path: Path):
    # The settings module exists only in a directory that --pythonpath adds, and the
    # environment names one that does not exist: each command works only if both are read.
    (tmp_path / "elsewhere_settings.py").write_text("from testproject.settings import *  # noqa\n")
    env = {**worker_env, "DJANGO_SETTINGS_MODULE": "no_such_settings_module"}
    job = record.enqueue({"n": "listed"})
    flags = ["--settings=elsewhere_settings", "--pythonpath", str(tmp_path)]
    # The errors, under --json, are also what a real process prints: the JSON document on
    # stdout, nothing on stderr, the documented exit status.
    runs = {
        "list": manage(env, "list", "--json", *flags),
        "inspect": manage(env, "inspect", "987654", "--json", *flags),
        "limit": manage(env, "list", "--limit", "99999999999999999999999", *flags, "--json"),
        "mcp": manage(env, "mcp", *flags, "--allow-actions"),
    }
    done = {name: (*run.communicate(timeout=120), run.returncode) for name, run in runs.items()}

    out, err, code = done["list"]
    assert code == 0, err
    assert [row["id"] for row in json.loads(out)] == [job.pk]
    for name, status, error in [
        ("inspect", EXIT_NOT_FOUND, "JOB_NOT_FOUND"),
        ("limit", EXIT_BAD_INPUT, "BAD_INPUT"),  # argparse's usage error, as JSON
    ]:
        out, err, code = done[name]
        assert (code, err) == (status, ""), err
        assert json.loads(out)["error"]["code"] == error
    assert "give a whole number from 1 to 1000" in json.loads(done["limit"][0])["error"]["message"]
    out, err, code = done["mcp"]
    assert (code, out) == (0, ""), err
    assert "unrecognized arguments" not in err and "Traceback" not in err


# --- errors under --json -----------------------------------------------------------------------


def json_error(*args: object) -> tuple[int, dict[str, Any]]:
    """Run ``jobs *args --json`` in-process; the exit status and the error document."""
    out = StringIO()
    with pytest.raises(CommandError) as info:
        call_command("jobs", *[str(a) for a in args], "--json", stdout=out)
    return info.value.returncode, json.loads(out.getvalue())


@pytest.mark.django_db
def test_errors_under_json_are_a_json_document_with_the_same_exit_status():
    done = record.enqueue({"n": "done"})
    Job.objects.filter(pk=done.pk).update(state="succeeded")
    cases = [
        (("inspect", 987654), EXIT_NOT_FOUND, "JOB_NOT_FOUND", "No job has id 987654."),
        (("retry", done.pk), EXIT_REFUSED, "NOT_RETRYABLE", f"Job #{done.pk} is succeeded"),
        (("cancel", done.pk), EXIT_REFUSED, "NOT_CANCELLABLE", ""),
        (("enqueue", "no.such.kind"), EXIT_NOT_FOUND, "UNKNOWN_KIND", "no.such.kind"),
        (("enqueue", "test.record", "--payload", "{x"), EXIT_BAD_INPUT, "BAD_INPUT", "JSON"),
        (("list", "--state", "sleeping"), EXIT_BAD_INPUT, "BAD_INPUT", "not a job state"),
        (("prune", "--older-than", "soon"), EXIT_BAD_INPUT, "INVALID_DURATION", "soon"),
    ]
    for args, status, code, words in cases:
        returncode, doc = json_error(*args)
        assert list(doc) == ["error"] and list(doc["error"]) == ["code", "message"]
        assert (returncode, doc["error"]["code"]) == (status, code), doc
        assert words in doc["error"]["message"]
        # Without --json: the same status, and the same code on stderr.
        with pytest.raises(CommandError) as plain:
            call_command("jobs", *[str(a) for a in args], stdout=StringIO())
        assert plain.value.returncode == status
        assert str(plain.value).startswith(f"{code}: ")
    assert Job.objects.count() == 1


@pytest.mark.process
def test_unexpected_errors_and_failed_checks_are_json_too(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.pop("DATABASE_URL", None)
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    env["SQLITE_PATH"] = str(tmp_path / "jobs.sqlite3")
    runs = {
        # The database cannot be opened: an unexpected error, with its traceback on stderr.
        "INTERNAL_ERROR": manage(
            {**env, "SQLITE_PATH": str(tmp_path / "missing" / "jobs.sqlite3")}, "list", "--json"
        ),
        # A system check fails before the command runs: its report follows on stderr.
        "SYSTEM_CHECK": manage({**env, "JOBS_LEASE": "nonsense"}, "stats", "--json"),
    }
    errors = {}
    for code, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == 1, err
        errors[code] = json.loads(out)["error"]
        assert errors[code]["code"] == code, out
    assert errors["INTERNAL_ERROR"]["message"] == "OperationalError: unable to open database file"
    assert "django_jobs.E004" in errors["SYSTEM_CHECK"]["message"]


def test_usage_errors_under_json_are_a_json_document_with_status_2():
    # What manage.py runs: run_from_argv, as from the command line.
    for args, words in [
        (["retry"], "the following arguments are required: id"),
        (["list", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["list", "--limit", "many"], "argument --limit: 'many' is not a limit"),
        (["drain", "--limit", "0"], "argument --limit: 0 is out of range"),
        (["resolve", "7", "--step", "pay", "--as", "maybe"], "argument --as: invalid choice"),
    ]:
        out, err = StringIO(), StringIO()
        with pytest.raises(SystemExit) as info:
            Command(stdout=out, stderr=err).run_from_argv(["manage.py", "jobs", *args, "--json"])
        assert info.value.code == EXIT_BAD_INPUT
        assert err.getvalue() == ""
        error = json.loads(out.getvalue())["error"]
        assert error["code"] == "BAD_INPUT" and words in error["message"], error


# --- bounded limits ----------------------------------------------------------------------------


def usage_error(*args: object) -> str:
    with pytest.raises(CommandError) as info:
        call_command("jobs", *[str(a) for a in args], stdout=StringIO())
    return str(info.value)


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=MAX_LIMIT + 1),
        st.integers(min_value=10**19, max_value=10**40),
    ),
    st.sampled_from(["list", "drain"]),
)
def test_limits_outside_1_to_1000_are_usage_errors(limit: int, command: str):
    with pytest.raises(CommandError) as info:
        PARSER.parse_args([command, "--limit", str(limit)])
    message = str(info.value)
    assert f"--limit: {str(limit)[:27]}" in message
    assert "is out of range; give a whole number from 1 to 1000." in message


@pytest.mark.django_db
def test_limits_within_bounds_and_other_bad_numbers():
    for n in range(3):
        record.enqueue({"n": n})
    assert len(json.loads(run_json("list", "--limit", "1000"))) == 3
    assert len(json.loads(run_json("list", "--limit", "1"))) == 1
    assert "'lots' is not a limit" in usage_error("list", "--limit", "lots")
    assert "is out of range" in usage_error("list", "--limit", "9" * 5000)  # not int()'s error
    assert "is out of range" in usage_error("inspect", 2**63)
    assert "is out of range" in usage_error("cancel", 0)
    assert "out of range; give a whole number from 1 to 100000" in usage_error(
        "prune", "--older-than", "1d", "--batch-size", 10**20
    )
    assert "out of range; give a whole number from -32768 to 32767" in usage_error(
        "enqueue", "test.record", "--priority", 10**21
    )
    assert json.loads(run_json("enqueue", "test.record", "--priority", "-32768"))["priority"] == (
        -32768
    )


def run_json(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, "--json", stdout=out)
    return out.getvalue()
