"""Workers on hosts of their own, stood in by network namespaces, drain one queue.

Each ``runjobs`` process runs in a network namespace of its own (``bench/netns.py``): it
reaches PostgreSQL only over its veth, through the forwarder in the root namespace, never over
the loopback the test shares with the server. The two drain the jobs together; each runs some.
Needs root and ``ip`` (skipped otherwise) and PostgreSQL (on SQLite the workers would share a
file, not a network).
"""

from __future__ import annotations

import signal
import subprocess
from collections import Counter

import pytest
from django.db import connection

from bench.netns import Hosts, available
from django_jobs.models import Job
from testproject.jobs import record
from testproject.models import Execution
from tests.conftest import exclusive, wait_until

from .fleet import states

pytestmark = [pytest.mark.faults, pytest.mark.process, pytest.mark.postgres, pytest.mark.engine]


@pytest.mark.parametrize(
    ("jobs", "workers"),
    [pytest.param(300, 2, id="2x300"), pytest.param(5000, 4, id="4x5000", marks=pytest.mark.soak)],
)
def test_workers_in_network_namespaces_drain_the_queue_together(
    spawn, worker_env: dict[str, str], jobs: int, workers: int
):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: the workers reach the database over TCP; SQLite is a file")
    why = available()
    if why is not None:
        pytest.skip(why)
    with exclusive("netns"), Hosts(workers) as hosts:  # fixed addresses: one run at a time
        procs = [
            spawn(
                "runjobs",
                "--processes",
                "0",  # the pid in the namespace is the one that runs the jobs
                "--concurrency",
                "2",
                "--no-scheduler",
                prefix=hosts.prefix(i),
                env={
                    "DATABASE_URL": hosts.database_url(i, worker_env["DATABASE_URL"]),
                    "JOBS_POLL_INTERVAL": "0.05s",
                },
            )
            for i in range(workers)
        ]
        for proc in procs:
            proc.wait_for_output("ready")
        ids = [job.pk for job in record.enqueue_many([{"n": n} for n in range(jobs)])]
        wait_until(
            lambda: Job.objects.filter(pk__in=ids, state="succeeded").count() == jobs,
            timeout=120,
            message=f"{states(ids)}\n" + "\n".join(p.output() for p in procs),
        )
        forwarded = hosts.forwarded()
        for proc in procs:
            proc.popen.send_signal(signal.SIGTERM)
            assert proc.popen.wait(timeout=30) == 0, proc.output()

    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for namespace, link in hosts.names:
        assert namespace not in left and f" {link}@" not in links, "a namespace or link is left"
    assert states(ids) == {"succeeded": jobs}
    ran = Counter(Execution.objects.filter(job_id__in=ids).values_list("pid", flat=True))
    assert sum(ran.values()) == jobs, "a job ran twice or not at all"
    by_worker = [ran.get(proc.popen.pid, 0) for proc in procs]
    assert set(ran) == {proc.popen.pid for proc in procs}, "a job ran outside the fleet"
    assert all(by_worker), f"a worker ran nothing: {by_worker}"
    # Each worker's connections came from its own namespace's address, over its veth.
    assert set(forwarded) == set(hosts.inside), forwarded
    print(f"\nnetns fleet: jobs per worker {by_worker}, connections forwarded {forwarded}")
