"""The benchmark's report: ratios within each repetition, goals, tables (no timing)."""

from __future__ import annotations

from bench.report import COMPARISONS, Comparison, figures_table, goals_met, side_by_side, unit

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
    table = figures_table({"enqueue": [1_234.4, 1_000.0], "pickup p50": [1.234]})
    assert "1,117" in table  # median of the two runs
    assert "1,234 1,000" in table
    assert "1.23" in table


def test_every_goal_of_the_hot_path_is_in_the_report():
    goals = {(c.figure, c.peer, c.goal, c.at_least) for c in COMPARISONS if c.goal}
    assert goals == {
        ("enqueue", "procrastinate: enqueue", 2.0, True),
        ("enqueue", "bare: insert+notify 1/tx", 0.5, True),
        ("enqueue in atomic", "enqueue", 1 / 1.5, True),
        ("pickup p50", "bare: pickup p50", 1.3, False),
        ("pickup p99", "bare: pickup p99", 2.0, False),
        ("drain async c=50", "drain c=50", 0.5, True),
        ("drain 3 steps c=4", "drain no-op c=4", 0.3, True),
    }
