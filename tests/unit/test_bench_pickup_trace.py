"""The pickup trace (``bench/pickup_trace.py``): what it patches is still there, and how it
splits each job's pickup into steps."""

from __future__ import annotations

import pytest

from bench.pickup_trace import PATCHED, STEPS, _steps, resolve


@pytest.mark.parametrize("target", PATCHED)
def test_every_step_the_trace_times_is_still_where_it_looks(target):
    owner, name = resolve(target)
    assert callable(getattr(owner, name))


def test_a_step_that_moved_stops_the_trace_naming_it():
    with pytest.raises(SystemExit, match=r"Worker\._claim_everything is gone"):
        resolve("django_jobs.engine.worker.worker:Worker._claim_everything")
    with pytest.raises(SystemExit, match=r"django_jobs\.nowhere:X\.y is gone"):
        resolve("django_jobs.nowhere:X.y")


def test_each_job_is_split_at_the_notification_and_claim_that_took_it():
    # Seconds. Job 1 is taken by the first claim; job 2 by the second, after a NOTIFY heard
    # while job 1's claim ran (it woke the loop) and one heard just before its own claim.
    sent = {1: (10.000, 10.001, 10.003), 2: (20.000, 20.002, 20.004)}
    stamps = {
        "heard": [10.002, 10.0045, 20.003],
        "awake": [10.0025, 10.0055, 20.0031],
        "claims": [(10.0030, 10.0050, 10.0052, [1]), (20.0035, 20.0050, 20.0051, [2])],
        "handed": {"1": 10.0053, "2": 20.0052},
    }
    latency = {1: 5.6, 2: 5.5}  # ms, as each runner returned it
    steps = _steps(stamps, sent, latency)
    assert list(steps) == list(STEPS)
    expected = {
        "enqueue, before its statement": (1.0 + 2.0) / 2,
        "insert statement": (2.0 + 2.0) / 2,
        "insert sent -> NOTIFY heard": (1.0 + 1.0) / 2,
        "heard -> claim loop awake": (0.5 + 0.1) / 2,
        "awake -> claim sent": (0.5 + 0.4) / 2,
        "claim statement": (2.0 + 1.5) / 2,
        "jobs built": (0.2 + 0.1) / 2,
        "built -> executor thread": (0.1 + 0.1) / 2,
        "executor -> runner": (0.3 + 0.3) / 2,
        "total (the pickup figure)": (5.6 + 5.5) / 2,
    }
    assert steps == pytest.approx(expected, abs=1e-6)
