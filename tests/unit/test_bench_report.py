"""The benchmark's report: ratios within each repetition, goals, tables (no timing)."""

from __future__ import annotations

from bench.report import (
    CELERY_PREFORK,
    COMPARISONS,
    PROCESSES_CPU,
    PROCESSES_NOOP,
    RECYCLING_DRAIN,
    Comparison,
    checks_table,
    figures_table,
    goals_met,
    side_by_side,
    tracing_figure,
    unit,
)

RUNS = {
    "enqueue": [2_000.0, 3_000.0, 1_000.0],
    "procrastinate: enqueue": [1_000.0, 1_000.0, 1_000.0],
    "bare: insert+notify 1/tx": [5_000.0, 4_000.0, 1_000.0],
    "enqueue in atomic": [1_000.0, 1_500.0, 600.0],
    "pickup p50": [2.0, 3.0, 2.6],
    "bare: pickup p50": [2.0, 2.0, 2.0],
}


def test_a_ratio_is_taken_within_each_repetition_then_its_median():
    ratios = Comparison("enqueue", "bare: insert+notify 1/tx", 0.5).ratios(RUNS)
    assert ratios == [0.4, 0.75, 1.0]
    # The median of the ratios (0.75), not the ratio of the medians (2,000 / 4,000 = 0.5).
    assert "0.75" in side_by_side(RUNS).splitlines()[3]


def test_goals_are_met_or_not_in_the_direction_of_the_figure():
    met = goals_met(RUNS)
    assert met["enqueue / procrastinate: enqueue"] is True  # median ratio 2.0 >= 2.0
    assert met["enqueue / bare: insert+notify 1/tx"] is True  # 0.75 >= 0.5
    assert met["enqueue in atomic / enqueue"] is False  # 0.5, 0.5, 0.6: under 1 / 1.5
    assert met["pickup p50 / bare: pickup p50"] is True  # latency: 1.3 <= 1.3
    # A goal whose figures were not measured is not reported.
    assert "pickup p99 / bare: pickup p99" not in met


def test_the_side_by_side_table_lists_only_measured_pairs_with_their_verdict():
    table = side_by_side(RUNS)
    lines = table.splitlines()[2:]
    assert len(lines) == 4
    assert any("procrastinate: enqueue" in line and line.endswith("yes") for line in lines)
    assert any(line.startswith("enqueue in atomic") and line.endswith("NO") for line in lines)
    assert "tasks-db" not in table


def test_units_and_the_figures_table():
    assert unit("enqueue") == "jobs/s"
    assert unit("bare: pickup p99") == "ms"
    assert unit("drain c=4 cpu") == "us/job"
    assert unit("async sleep x100 c=50 (s)") == "s"
    assert unit("phase claim cpu") == "us/job"
    assert unit("memory: worker (MiB)") == "MiB"
    assert unit("memory: worker growth (x)") == "x"
    table = figures_table(
        {
            "enqueue": [1_234.4, 1_000.0],
            "pickup p50": [1.234],
            "memory: worker (MiB)": [103.26],
            "memory: worker growth (x)": [1.0071],
        }
    )
    assert "1,117" in table  # median of the two runs
    assert "1,234 1,000" in table
    assert "1.23" in table
    assert "103.3" in table
    assert "1.007" in table


def test_every_goal_of_the_hot_path_is_in_the_report():
    goals = {(c.figure, c.peer, c.goal, c.at_least) for c in COMPARISONS if c.goal}
    assert goals == {
        ("enqueue", "procrastinate: enqueue", 2.0, True),
        ("enqueue", "bare: insert+notify 1/tx", 0.5, True),
        ("enqueue in atomic", "enqueue", 1 / 1.5, True),
        ("pickup p50", "bare: pickup p50", 1.3, False),
        ("pickup p99", "bare: pickup p99", 2.0, False),
        ("pickup p50", "procrastinate: pickup p50", 1.0, False),
        ("drain c=1", "bare: drain", 0.5, True),
        ("drain c=4", "bare: drain", 0.5, True),
        ("drain async c=50", "drain c=50", 0.5, True),
        ("drain 3 steps c=4", "drain no-op c=4", 0.3, True),
        ("drain 3 steps c=50", "drain no-op c=50", 0.3, True),
        ("drain 3 steps c=1", "dbos: 3 steps c=1", 3.0, True),
        ("drain 3 steps c=4", "dbos: 3 steps c=4", 3.0, True),
        ("drain 3 steps c=50", "dbos: 3 steps c=50", 3.0, True),
        # Worker processes: two nearly twice one on CPU-bound jobs, the default (one child)
        # within 5 % of jobs in the worker's own process, at least Celery's prefork pool.
        (f"{PROCESSES_CPU}2", f"{PROCESSES_CPU}1", 1.7, True),
        (f"{PROCESSES_NOOP}1", f"{PROCESSES_NOOP}0", 0.95, True),
        (f"{PROCESSES_CPU}2", CELERY_PREFORK, 1.0, True),
        # Recycling every 3 jobs at least 0.7 of the drain without recycling.
        (RECYCLING_DRAIN, f"{PROCESSES_CPU}2", 0.7, True),
        # A kind with a time limit: its drain and pickup within 3 % of the same kind without.
        ("drain c=4 soft limit", "drain c=4 no limit", 0.97, True),
        ("pickup p50 soft limit", "pickup p50 no limit", 1.03, False),
        # Tracing: the API without an SDK within 2 % of off, the SDK within 15 %.
        ("tracing: enqueue api", "tracing: enqueue off", 0.98, True),
        ("tracing: enqueue sdk", "tracing: enqueue off", 0.85, True),
        ("tracing: drain api", "tracing: drain off", 0.98, True),
        ("tracing: drain sdk", "tracing: drain off", 0.85, True),
        # Celery's API over the engine: delay() and its drain within 10 % of native enqueue.
        ("celery: delay()", "celery: native enqueue", 0.9, True),
        ("celery: drain c=4", "celery: native drain c=4", 0.9, True),
    }


def test_a_tracing_cpu_figure_is_in_microseconds_per_job():
    assert tracing_figure("drain cpu", "sdk") == "tracing: drain sdk cpu"
    assert unit(tracing_figure("drain cpu", "sdk")) == "us/job"
    assert unit(tracing_figure("drain", "sdk")) == "jobs/s"


# -- durable steps beside DBOS -----------------------------------------------------------------

STEPS = {
    "drain no-op c=4": [8_000.0, 6_000.0, 7_000.0],
    "drain 3 steps c=1": [300.0, 200.0, 260.0],
    "drain 3 steps c=4": [600.0, 500.0, 700.0],
    "drain no-op c=50": [6_000.0, 5_000.0, 6_000.0],
    "drain 3 steps c=50": [2_000.0, 1_400.0, 1_500.0],
    "dbos: 3 steps c=1": [100.0, 50.0, 100.0],
    "dbos: 3 steps c=4": [150.0, 200.0, 250.0],
    "dbos: 3 steps c=50": [500.0, 500.0, 400.0],
}


def test_three_steps_beside_dbos_are_judged_at_each_concurrency():
    met = goals_met(STEPS)
    # c=1: ratios 3.0, 4.0, 2.6 -> median 3.0, met (at least 3).
    assert met["drain 3 steps c=1 / dbos: 3 steps c=1"] is True
    # c=4: 4.0, 2.5, 2.8 -> median 2.8: not met, though the medians' ratio (600 / 200) is 3.
    assert met["drain 3 steps c=4 / dbos: 3 steps c=4"] is False
    # c=50: 4.0, 2.8, 3.75 -> 3.75.
    assert met["drain 3 steps c=50 / dbos: 3 steps c=50"] is True
    # Steps against no-ops at c=50: 0.33, 0.28, 0.25 -> 0.28, under 0.3.
    assert met["drain 3 steps c=50 / drain no-op c=50"] is False
    lines = side_by_side(STEPS).splitlines()
    row = next(line for line in lines if "dbos: 3 steps c=4" in line)
    assert row.split()[-4:] == ["2.80", "≥", "3.00", "NO"]  # ratio, goal, met
    assert next(line for line in lines if "dbos: 3 steps c=1" in line).endswith("yes")


def test_a_ratio_that_rounds_onto_its_goal_is_printed_with_the_digits_that_decide_it():
    steps = Comparison("drain 3 steps c=50", "drain no-op c=50", 0.3)
    assert steps.ratio_text(0.299994) == "0.29999"  # not "0.30" beside "NO"
    assert steps.ratio_text(0.3004) == "0.3004"
    assert steps.ratio_text(0.3) == "0.30"  # on the goal exactly: met, nothing to tell apart
    assert steps.ratio_text(0.2844) == "0.28"
    assert Comparison("enqueue", "tasks-db: enqueue").ratio_text(1.0049) == "1.00"  # no goal
    runs = {"drain no-op c=50": [5_949.0], "drain 3 steps c=50": [1_784.6]}
    row = side_by_side(runs).splitlines()[2]
    assert row.split()[-4:] == ["0.29998", "≥", "0.30", "NO"]


def test_a_kill_check_count_is_bounded_by_its_largest_run():
    runs = {
        "stepskill: django_jobs re-run after stored (n)": [0.0, 0.0, 0.0],
        "stepskill: dbos re-run after stored (n)": [0.0, 3.0, 1.0],
        "stepskill: dbos re-run in all (n)": [4.0, 5.0, 2.0],
    }
    assert unit("stepskill: dbos re-run in all (n)") == "n"
    met = goals_met(runs)
    assert met["stepskill: django_jobs re-run after stored (n)"] is True
    assert "stepskill: dbos re-run after stored (n)" not in met  # shown, not judged
    one_bad = {"stepskill: django_jobs re-run after stored (n)": [0.0, 1.0, 0.0]}
    assert goals_met(one_bad)["stepskill: django_jobs re-run after stored (n)"] is False
    table = checks_table(runs).splitlines()
    assert len(table) == 5  # head, rule, the three counts measured
    # figure, the largest run, the runs, the goal, met.
    assert table[2].split()[-7:] == ["0", "0", "0", "0", "≤", "0", "yes"]
    assert table[3].split()[-5:] == ["3", "0", "3", "1", "-"]  # DBOS's: measured, no goal
    assert checks_table({}) == ""
    assert checks_table(one_bad).splitlines()[2].endswith("NO")


# -- a revision beside the working tree --------------------------------------------------------

from bench.report import (  # noqa: E402 - grouped with the tests that use them
    NOISE_RULE,
    against_ratios,
    against_table,
    spread,
    versus,
)


def verdicts(work: dict[str, list[float]], rev: dict[str, list[float]]) -> dict[str, str]:
    return {v.figure: v.verdict for v in versus(work, rev)}


def test_against_a_revision_the_ratio_is_oriented_so_that_below_one_is_worse():
    work = {"enqueue": [900.0, 1_100.0], "pickup p50": [4.0, 2.0], "drain c=1 cpu": [200.0, 50.0]}
    rev = {"enqueue": [1_000.0, 1_000.0], "pickup p50": [2.0, 2.0], "drain c=1 cpu": [100.0, 100.0]}
    assert against_ratios("enqueue", work, rev) == [0.9, 1.1]
    # A latency, a CPU cost: twice the time is half as good.
    assert against_ratios("pickup p50", work, rev) == [0.5, 1.0]
    assert against_ratios("drain c=1 cpu", work, rev) == [0.5, 2.0]


def test_the_median_of_per_repetition_ratios_not_the_ratio_of_medians():
    # Load moved both sides together: repetition 2 ran at a third of the speed.
    work = {"enqueue": [1_000.0, 330.0, 1_020.0]}
    rev = {"enqueue": [1_000.0, 300.0, 600.0]}
    (v,) = versus(work, rev)
    assert v.ratios == (1.0, 1.1, 1.7)
    assert v.ratio == 1.1  # the ratio of the medians would be 1,000 / 600 = 1.67
    assert (v.work, v.rev) == (1_000.0, 600.0)


def test_spread_is_max_minus_min_over_the_median():
    assert spread([90.0, 100.0, 120.0]) == 0.3
    assert spread([100.0]) == 0.0
    assert spread([]) == 0.0


def test_a_drop_in_every_repetition_beyond_revs_own_spread_is_worse():
    # REV ran at 1,000 +- 2%; the working tree at 20% less in each repetition.
    rev = {"enqueue": [990.0, 1_000.0, 1_010.0], "pickup p99": [10.0, 10.1, 9.9]}
    work = {"enqueue": [800.0, 790.0, 810.0], "pickup p99": [13.0, 12.5, 14.0]}
    assert verdicts(work, rev) == {"enqueue": "worse", "pickup p99": "worse"}
    table = against_table(work, rev)
    assert [line.split()[-1] for line in table.splitlines()[2:]] == ["worse", "worse"]


def test_a_drop_within_revs_spread_or_not_in_every_repetition_is_not_worse():
    rev = {
        # REV itself moved by 30% from run to run: a 10% drop is within its noise.
        "enqueue": [800.0, 1_000.0, 1_100.0],
        # Steady, but one repetition of the working tree came out ahead.
        "enqueue_many": [10_000.0, 10_000.0, 10_000.0],
    }
    work = {"enqueue": [720.0, 900.0, 990.0], "enqueue_many": [8_000.0, 10_500.0, 8_000.0]}
    assert verdicts(work, rev) == {"enqueue": "same", "enqueue_many": "same"}


def test_the_working_trees_own_spread_counts_as_noise_too():
    # REV was steady; the working tree moved by 43% between its repetitions, so a 10% drop
    # is within what the figure does from one repetition to the next.
    rev = {"enqueue": [1_000.0, 1_000.0, 1_000.0]}
    work = {"enqueue": [600.0, 900.0, 990.0]}
    (v,) = versus(work, rev)
    assert v.rev_spread == 0.0
    assert v.noise == v.work_spread == 0.39 / 0.9
    assert v.verdict == "same"


def test_a_gain_beyond_the_noise_is_better_and_fewer_than_three_runs_give_no_verdict():
    rev = {
        "drain c=4": [1_000.0, 1_000.0, 1_000.0],
        # Two repetitions, both far below: still no verdict (two runs say little of the noise).
        "drain c=1": [1_000.0, 1_000.0],
        "drain c=50": [1_000.0],
    }
    work = {
        "drain c=4": [1_500.0, 1_400.0, 1_450.0],
        "drain c=1": [500.0, 510.0],
        "drain c=50": [1.0],
    }
    assert verdicts(work, rev) == {"drain c=4": "better", "drain c=1": "-", "drain c=50": "-"}


def test_better_is_worse_with_the_sides_swapped_so_a_wild_latency_is_not_better():
    # A p99 of 50 jobs on a loaded machine: the working tree's REV / work ratios 1.51, 2.54 and
    # 4.32, REV's own spread 148%. "ratio - 1 > noise" would call it better; REV is not worse
    # than the working tree beyond that noise, so it is the same.
    rev = {"pickup p99": [151.0, 254.0, 402.0]}
    work = {"pickup p99": [100.0, 100.0, 93.0]}
    (v,) = versus(work, rev)
    assert v.ratio > 1 + v.noise
    assert v.verdict == "same"
    # Swapped, the same numbers are not "worse" either.
    assert verdicts(rev, work) == {"pickup p99": "same"}


def test_the_against_table_shows_both_medians_the_ratio_and_its_range():
    work = {"enqueue": [900.0, 950.0, 1_000.0], "only here": [1.0]}
    rev = {"enqueue": [1_000.0, 1_000.0, 1_000.0]}
    lines = against_table(work, rev).splitlines()
    assert len(lines) == 3  # a figure only one side measured is left out
    row = lines[2].split()
    assert row[:6] == ["enqueue", "jobs/s", "950", "1,000", "0.95", "0.90..1.00"]
    # The noise is the working tree's spread, 100 / 950; 1.00 in one repetition is not below 1.
    assert row[6:] == ["11%", "same"]
    assert "below 1 is always worse" in NOISE_RULE
