"""The worker's per-job lines: one as each job ends at the default verbosity, one as it starts
too with ``-v 2``, none with ``-v 0``; as text or JSON.

Real ``runjobs --burst`` processes on the test database (SQLite or PostgreSQL, whichever the
run uses); the lines are read from their stderr.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from django_jobs.models import Job
from testproject.jobs import always_fail, logs, record
from tests.conftest import ROOT

pytestmark = pytest.mark.process

TEXT_LINE = re.compile(
    r"job\.(?P<event>started|ended) job=(?P<job>\d+) kind=(?P<kind>\S+) attempt=(?P<attempt>\d+)"
    r" queue=(?P<queue>\S+)(?: outcome=(?P<outcome>\w+) duration_s=(?P<duration_s>[0-9.e-]+))?$"
)


def runjobs(env: dict[str, str], *args: str) -> str:
    """Run ``runjobs --burst *args`` to the end; its stderr."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runjobs", "--burst", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def three_jobs() -> dict[str, Job]:
    """One that succeeds, one that fails for good, one that fails and will retry."""
    ok = record.enqueue({"n": "ok"})
    dead = always_fail.enqueue({"n": "dead"})
    Job.objects.filter(pk=dead.pk).update(max_attempts=1)
    again = always_fail.enqueue({"n": "again"})
    return {"succeeded": ok, "failed": dead, "retrying": again}


def check_lines(lines: list[dict[str, Any]], jobs: dict[str, Job]) -> None:
    for outcome, job in jobs.items():
        mine = [line for line in lines if int(line["job"]) == job.pk]
        assert [line["event"] for line in mine] == ["job.started", "job.ended"], lines
        started, ended = mine
        assert started["kind"] == ended["kind"] == job.kind
        assert started["queue"] == ended["queue"] == job.queue
        assert int(started["attempt"]) == int(ended["attempt"]) == 1
        assert ended["outcome"] == outcome
        assert 0 <= float(ended["duration_s"]) < 60


def test_runjobs_v2_writes_a_line_as_each_job_starts_and_ends(worker_env):
    jobs = three_jobs()
    stderr = runjobs(worker_env, "-v", "2")
    lines = []
    for text in stderr.splitlines():
        if found := TEXT_LINE.search(text):
            lines.append({**found.groupdict(), "event": f"job.{found['event']}"})
    check_lines(lines, jobs)


def text_lines(stderr: str) -> list[dict[str, Any]]:
    return [
        {**found.groupdict(), "event": f"job.{found['event']}"}
        for text in stderr.splitlines()
        if (found := TEXT_LINE.search(text))
    ]


def test_runjobs_writes_one_line_per_outcome_by_default_and_none_with_v0(worker_env):
    jobs = three_jobs()
    lines = text_lines(runjobs(worker_env))
    assert [line["event"] for line in lines] == ["job.ended"] * 3, lines
    for outcome, job in jobs.items():
        (mine,) = [line for line in lines if int(line["job"]) == job.pk]
        assert (mine["kind"], mine["attempt"], mine["outcome"]) == (job.kind, "1", outcome)
        assert 0 <= float(mine["duration_s"]) < 60
    Job.objects.filter(pk=jobs["retrying"].pk).update(
        run_at=Job.objects.get(pk=jobs["retrying"].pk).created_at
    )
    quiet = runjobs(worker_env, "-v", "0")
    assert Job.objects.get(pk=jobs["retrying"].pk).attempts == 2  # it ran, and said nothing
    assert text_lines(quiet) == [], quiet


def test_log_format_json_writes_every_line_as_json(worker_env):
    jobs = three_jobs()
    stderr = runjobs(worker_env, "-v", "2", "--log-format", "json")
    records = [json.loads(text) for text in stderr.splitlines()]  # every line is JSON
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    job_lines = [r for r in records if r.get("event") in ("job.started", "job.ended")]
    assert {r["logger"] for r in job_lines} == {"django_jobs.worker"}
    assert all(isinstance(r["job"], int) and isinstance(r["attempt"], int) for r in job_lines)
    assert all(r["job_id"] == r["job"] and r["queue"] == "default" for r in job_lines)
    check_lines(job_lines, jobs)
    # At the default verbosity: the outcome lines only.
    for job in jobs.values():
        Job.objects.filter(pk=job.pk).update(state="queued", run_at=job.created_at)
    default = [
        json.loads(text) for text in runjobs(worker_env, "--log-format", "json").splitlines()
    ]
    assert {r["event"] for r in default if "event" in r} == {"job.ended"}
    # The failure's traceback stays inside its one JSON line.
    assert any(r["message"].startswith(f"Job {jobs['failed'].pk} (test.fail)") for r in records)


def test_a_jobs_own_lines_carry_its_fields_by_default_and_in_a_handler_it_added_later(worker_env):
    # A worker process (``--processes`` 1, the default) runs them; its stderr is runjobs'.
    mail = logs.enqueue({"n": 1}, queue="mail")
    default = logs.enqueue({"n": 2})
    stderr = runjobs({**worker_env, "JOBS_TEST_NO_LOGGING": "1"})  # no LOGGING setting
    for job, queue, n in ((mail, "mail", 1), (default, "default", 2)):
        # runjobs' own text lines, with no LOGGING setting: the job's fields after the logger.
        tag = re.escape(f"[job_id={job.pk} kind=test.logs attempt=1 queue={queue}]")
        assert re.search(rf" WARNING testproject\.logs {tag}: logged by the job {n}$", stderr, re.M)
        # A handler the job added as it ran, long after the worker started, names them too.
        late = f"late handler: job_id={job.pk} kind=test.logs attempt=1 queue={queue}"
        assert f"{late} logged by the job {n}\n" in stderr, stderr
    # The worker's own lines are as they were: the fields in their message, no tag.
    assert (
        f"job.ended job={mail.pk} kind=test.logs attempt=1 queue=mail outcome=succeeded" in stderr
    )
    assert "[job_id" not in "".join(line for line in stderr.splitlines() if "job.ended" in line)
