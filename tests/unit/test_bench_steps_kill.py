"""The kill -9 check's count (``bench/steps_kill.py``): which step bodies ran again, and
whether their result had been stored before they did."""

from __future__ import annotations

import pytest

from bench.steps_kill import count_runs

EXPECTED = {(job, step) for job in ("1", "2") for step in ("one", "two", "three")}


def test_a_body_run_after_the_kill_counts_against_the_engine_only_if_its_result_was_stored():
    # Killed with job 1 done, job 2's "one" stored and its "two" in flight (ran, not stored).
    before = [("1", "one"), ("1", "two"), ("1", "three"), ("2", "one"), ("2", "two")]
    stored = {("1", "one"), ("1", "two"), ("1", "three"), ("2", "one")}
    # The restart runs job 2's "two" again (fair: its result was not stored), then "three".
    after = [*before, ("2", "two"), ("2", "three")]
    assert count_runs(before, after, stored, EXPECTED) == {
        "re-run after stored": 0,
        "re-run in all": 1,
        "ran before the kill": 5,
    }
    # Had the restart also run job 2's stored "one" again, and job 1's "three" twice:
    worse = [*after, ("2", "one"), ("1", "three"), ("1", "three")]
    counts = count_runs(before, worse, stored, EXPECTED)
    assert counts["re-run after stored"] == 3
    assert counts["re-run in all"] == 4


def test_a_step_that_never_ran_stops_the_check():
    before = [("1", "one")]
    with pytest.raises(SystemExit, match="never ran"):
        count_runs(before, before, {("1", "one")}, EXPECTED)


def test_only_dbos_runs_the_steps_and_pickup_figures_beside_dbos_whatever_peers_says():
    from bench.run import parse_args, selected_peers

    args = parse_args(["--only", "dbos", "--peers", "procrastinate"])
    assert args.only == {"dbos", "steps", "pickup"}
    assert selected_peers(args, args.only) == {"dbos"}
    default = parse_args([])
    assert "dbos" in selected_peers(default, default.only)  # a peer of the default run
    assert "stepskill" not in default.only  # the kill check only when named
    named = parse_args(["--only", "stepskill,peers", "--peers", "bare"])
    assert selected_peers(named, named.only) == {"bare"}
    with pytest.raises(SystemExit):
        parse_args(["--only", "dbos2"])
