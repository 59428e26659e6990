"""A worker's network goes silent while it holds a job (docs/reliability.md).

The worker talks to PostgreSQL through a proxy of the test's own that stops forwarding without
closing anything. Within the lease a second worker takes the job over and finishes it; when
the network comes back, the first worker's late writes must not land over the new outcome (it
is fenced out: the job is no longer its own), and it goes on working by itself.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from django_jobs.models import Job, JobStep
from testproject.jobs import three_steps
from testproject.models import Execution
from tests.conftest import wait_until

from .fleet import LEASE, assert_exactly_once, enqueue_three_steps, require_postgres, states
from .proxy import SilentProxy

pytestmark = [pytest.mark.faults, pytest.mark.process, pytest.mark.postgres, pytest.mark.engine]


@pytest.fixture
def proxy() -> Iterator[SilentProxy]:
    require_postgres()
    settings = connection.settings_dict
    silent = SilentProxy(settings["HOST"], int(settings["PORT"]))
    yield silent
    silent.close()


def through(proxy: SilentProxy) -> dict[str, str]:
    settings = connection.settings_dict
    return {
        "JOBS_LEASE": LEASE,
        "DATABASE_URL": f"postgres://{settings['USER']}@127.0.0.1:{proxy.port}/{settings['NAME']}",
    }


def test_a_worker_cut_off_is_fenced_out_and_recovers(spawn, proxy, tmp_path: Path):
    hold, entered = tmp_path / "release", tmp_path / "entered"
    held = three_steps.enqueue(
        {"n": "held", "hold": str(hold), "entered": str(entered)}, priority=-1
    )
    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=through(proxy))
    # Inside its first step's activity (whose row is written once, at its end).
    wait_until(entered.exists, message=f"the first worker never started the job:\n{first.output()}")
    assert f":{first.popen.pid}:" in Job.objects.get(pk=held.pk).worker_id

    proxy.cut()
    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env={"JOBS_LEASE": LEASE})
    # Once the lease runs out without a heartbeat, the second worker re-asks the job and runs
    # it to the end: its first step again (the first run never finished it), then the rest.
    wait_until(
        lambda: Job.objects.get(pk=held.pk).state == "succeeded",
        timeout=60,
        message=f"the job was not taken over: {states([held.pk])}\n{second.output()}",
    )
    done = Job.objects.get(pk=held.pk)
    assert done.result["first"]["pid"] == second.popen.pid
    assert first.popen.poll() is None

    # The first worker's runner goes on (its activity returns) and writes into the silence;
    # then the network comes back and those writes arrive, late.
    hold.touch()
    proxy.restore()
    # It recovers by itself: it takes new work as soon as the second worker stops.
    second.popen.send_signal(signal.SIGTERM)
    assert second.popen.wait(timeout=30) == 0, second.output()
    after = enqueue_three_steps(20, pause=0)
    wait_until(
        lambda: states(after) == {"succeeded": 20},
        timeout=60,
        message=f"the first worker did not recover: {states(after)}\n{first.output()}",
    )
    assert set(Execution.objects.filter(job_id__in=after).values_list("pid", flat=True)) == {
        first.popen.pid
    }
    assert_exactly_once([*after, held.pk])

    # Nothing the cut-off worker wrote late landed over the second worker's run.
    again = Job.objects.get(pk=held.pk)
    assert (again.state, again.result, again.attempts) == (done.state, done.result, done.attempts)
    # The ended job keeps the id of the worker whose run ended it: the second one.
    assert again.worker_id == done.worker_id
    assert f":{second.popen.pid}:" in (again.worker_id or "")
    steps = {s.name: s.value for s in JobStep.objects.filter(job_id=held.pk)}
    assert steps == {
        "first": done.result["first"],
        "effect": done.result["effect"],
        "last": done.result["last"],
    }, "a step's stored value is not the one the job's outcome used"
    assert first.popen.poll() is None


UNITS = {"ms": 0.001, "sec": 1.0, "min": 60.0, "h": 3600.0}


def keepalive_timers(port: int) -> list[float | None]:
    """Seconds to the next keepalive probe of each established connection to ``port`` (None:
    keepalive off), read from ``ss -o``'s timer, e.g. ``timer:(keepalive,9.8sec,0)``."""
    listing = subprocess.run(
        ["ss", "-tnoH", "state", "established", f"( dport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    timers: list[float | None] = []
    for line in listing.splitlines():
        found = re.search(r"timer:\(keepalive,([^,]+),", line)
        timers.append(
            None
            if found is None
            else sum(
                float(n) * UNITS[unit]
                for n, unit in re.findall(r"([\d.]+)(ms|sec|min|h)", found.group(1))
            )
        )
    return timers


def test_every_worker_connection_has_tcp_keepalive(spawn, proxy):
    # What bounds a silent network that drops packets (which a proxy in user space cannot
    # imitate: its kernel still acknowledges): TCP keepalives on idle connections and
    # tcp_user_timeout on statements in flight, set by the worker (SILENT_NETWORK_BOUNDS).
    if shutil.which("ss") is None:
        pytest.skip("needs ss (iproute2) to read the sockets' timers")
    worker = spawn("runjobs", "--processes", "0", "--concurrency", "2", env=through(proxy))
    # Its claim, keeper, LISTEN and executor connections: a job per executor makes them all.
    jobs = enqueue_three_steps(4, pause=0)
    wait_until(lambda: states(jobs) == {"succeeded": 4}, message=worker.output())
    timers = wait_until(lambda: (t := keepalive_timers(proxy.port)) and len(t) >= 4 and t)
    # libpq turns keepalive on by default, but with the system's idle time (2 hours on
    # Linux): the worker's own options make it 10 s.
    assert all(t is not None and t <= 10.5 for t in timers), timers


def step_lock_waiters() -> int:
    """Connections waiting on a lock of a step row (an atomic step's, held by a connection cut
    off mid-step); not another wait that a cut-off worker may cause meanwhile (its keeper's
    chores, the charts' minutes)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' "
            "AND query LIKE '%%django_jobs_jobstep%%'"
        )
        return cursor.fetchone()[0]


def end_connections_from(ports: list[int]) -> int:
    """End the server side of these connections, as the server does once it sees them dead."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND client_port = ANY(%s)",
            [ports],
        )
        return cursor.fetchone()[0]


def test_a_worker_cut_off_inside_an_atomic_step_delays_the_takeover_and_nothing_else(
    spawn, proxy, tmp_path: Path
):
    # Cut off with its atomic step's transaction open, the first worker's server connection
    # keeps its locks: the worker that takes the job over waits on them (it must not run the
    # step beside it), until the server ends that connection (here by hand; in production its
    # TCP keepalives or idle_in_transaction_session_timeout). Then the takeover runs the step,
    # once; the first worker's commit fails, and it recovers.
    hold, entered = tmp_path / "release", tmp_path / "entered"
    held = three_steps.enqueue(
        {"n": "in-atomic", "hold": str(hold), "hold_in": "effect", "entered": str(entered)},
        priority=-1,
    )
    first = spawn("runjobs", "--processes", "0", "--concurrency", "1", env=through(proxy))
    wait_until(entered.exists, message=f"never inside the atomic step:\n{first.output()}")

    proxy.cut()
    second = spawn("runjobs", "--processes", "0", "--concurrency", "1", env={"JOBS_LEASE": LEASE})
    wait_until(
        lambda: step_lock_waiters() >= 1,
        timeout=60,
        message=f"the takeover did not reach the step: {states([held.pk])}\n{second.output()}",
    )
    row = Job.objects.get(pk=held.pk)
    assert row.state == "running" and f":{second.popen.pid}:" in row.worker_id
    assert not Execution.objects.filter(job_id=held.pk).exists()  # nothing committed

    assert end_connections_from(proxy.upstream_ports) >= 1
    wait_until(
        lambda: Job.objects.get(pk=held.pk).state == "succeeded",
        timeout=60,
        message=f"the takeover did not finish: {states([held.pk])}\n{second.output()}",
    )
    done = Job.objects.get(pk=held.pk)
    assert done.result["effect"]["pid"] == second.popen.pid

    hold.touch()
    proxy.restore()
    second.popen.send_signal(signal.SIGTERM)
    assert second.popen.wait(timeout=30) == 0, second.output()
    after = enqueue_three_steps(10, pause=0)
    wait_until(
        lambda: states(after) == {"succeeded": 10},
        timeout=60,
        message=f"the first worker did not recover: {states(after)}\n{first.output()}",
    )
    assert_exactly_once([*after, held.pk])
    again = Job.objects.get(pk=held.pk)
    assert (again.state, again.result, again.attempts) == (done.state, done.result, done.attempts)
    assert first.popen.poll() is None
