"""The benchmark's report: every figure's runs and median, then django_jobs beside each peer.

Pure functions of the numbers (``{figure: [value per repetition]}``), so a test can check the
arithmetic on made-up figures. A ratio is always django_jobs / the peer, computed within each
repetition (the two were measured seconds apart, under the same load) and then the median of
those ratios is shown: on a shared machine the load moves absolute figures tenfold, the
ratio of two figures taken together much less.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

Runs = dict[str, list[float]]


def unit(figure: str) -> str:
    if "pickup" in figure or figure.endswith("(ms)"):
        return "ms"
    if figure.endswith("(s)"):
        return "s"
    if figure.endswith(" cpu"):
        return "us/job"
    if figure.endswith("(MiB)"):
        return "MiB"
    if figure.endswith("(x)"):
        return "x"
    if figure.endswith("(n)"):
        return "n"
    return "jobs/s"


def higher_is_better(figure: str) -> bool:
    return unit(figure) == "jobs/s"


def fmt(value: float | None, figure_unit: str) -> str:
    if value is None:
        return "-"
    if figure_unit == "x":
        return f"{value:,.3f}"
    if figure_unit == "MiB":
        return f"{value:,.1f}"
    return f"{value:,.2f}" if figure_unit in ("ms", "s") else f"{value:,.0f}"


@dataclass(frozen=True)
class Comparison:
    """``figure`` (django_jobs) beside ``peer``; with a goal, the ratio figure / peer must be
    at least (``at_least``) or at most ``goal``."""

    figure: str
    peer: str
    goal: float | None = None
    at_least: bool = True

    def ratios(self, runs: Runs) -> list[float]:
        """figure / peer in each repetition where both were measured."""
        return [
            mine / theirs
            for mine, theirs in zip(
                runs.get(self.figure, []), runs.get(self.peer, []), strict=False
            )
            if theirs
        ]

    def met(self, ratio: float) -> bool | None:
        if self.goal is None:
            return None
        return ratio >= self.goal if self.at_least else ratio <= self.goal

    def ratio_text(self, ratio: float) -> str:
        """The ratio to two decimals, or to as many more (up to six) as it takes to tell it
        from the goal: a steps ratio of 0.29999 printed as "0.30" beside "≥ 0.30  NO" reads
        as a wrong verdict."""
        if self.goal is None:
            return f"{ratio:.2f}"
        for digits in range(2, 7):
            text = f"{ratio:.{digits}f}"
            if text != f"{self.goal:.{digits}f}" or ratio == self.goal:
                break
        return text


#: The figures of bench/processes.py that the comparisons below name.
PROCESSES_CPU = "processes: cpu-bound drain --processes "
PROCESSES_NOOP = "processes: no-op drain --processes "
CELERY_PREFORK = "processes: cpu-bound drain celery prefork c=2"
KILL_TO_WORKER_LOST = "processes: kill -9 of a child to WORKER_LOST (ms)"
CHILD_START = "processes: a child's start, kill -9 to ready, median (ms)"
CHILD_FORK = "processes: a child's start, as the supervisor logs it, median (ms)"
RECYCLING_DRAIN = "processes: cpu-bound drain --processes 2 --max-jobs-per-child 3"
KILL_TO_RUNNING = "processes: kill -9 to the job running again, 3,000 queued (ms)"


def tracing_figure(name: str, mode: str) -> str:
    """A figure of bench/tracing.py: ``name`` (enqueue, drain, drain cpu) in tracing ``mode``
    (off, api, sdk, sampled, floor)."""
    if name.endswith(" cpu"):
        return f"tracing: {name[: -len(' cpu')]} {mode} cpu"
    return f"tracing: {name} {mode}"


COMPARISONS: tuple[Comparison, ...] = (
    Comparison("enqueue", "procrastinate: enqueue", 2.0),
    Comparison("enqueue", "bare: insert+notify 1/tx", 0.5),
    Comparison("enqueue", "bare: insert 1/tx"),
    Comparison("enqueue", "tasks-db: enqueue"),
    Comparison("enqueue in atomic", "enqueue", 1 / 1.5),
    Comparison("enqueue in atomic", "bare: insert+notify in tx"),
    # The machine's own ratio for the goal above: BEGIN and COMMIT are round trips too.
    Comparison("bare: insert+notify in tx", "bare: insert+notify 1/tx"),
    Comparison("enqueue_many", "procrastinate: enqueue_many"),
    Comparison("enqueue_many", "bare: insert 100/tx"),
    Comparison("enqueue_many", "bare: multi-row insert"),
    Comparison("enqueue_many", "bare: copy"),
    # With the live events on, as every figure here: the bare loop stores no event.
    Comparison("drain c=1", "bare: drain", 0.5),
    Comparison("drain c=4", "bare: drain", 0.5),
    Comparison("drain c=1", "procrastinate: drain c=1"),
    Comparison("drain c=1", "tasks-db: drain c=1"),
    Comparison("drain c=4", "procrastinate: drain c=4"),
    Comparison("drain async c=50", "drain c=50", 0.5),
    Comparison("drain 3 steps c=4", "drain no-op c=4", 0.3),
    Comparison("drain 3 steps c=50", "drain no-op c=50", 0.3),
    Comparison("drain 3 steps c=1", "dbos: 3 steps c=1", 3.0),
    Comparison("drain 3 steps c=4", "dbos: 3 steps c=4", 3.0),
    Comparison("drain 3 steps c=50", "dbos: 3 steps c=50", 3.0),
    Comparison("pickup p50", "bare: pickup p50", 1.3, at_least=False),
    Comparison("pickup p99", "bare: pickup p99", 2.0, at_least=False),
    Comparison("pickup p50", "procrastinate: pickup p50", 1.0, at_least=False),
    Comparison("pickup p99", "procrastinate: pickup p99"),
    Comparison("pickup p50", "dbos: pickup p50 (1 s poll)"),
    Comparison("pickup p99", "dbos: pickup p99 (1 s poll)"),
    # Time limits armed on every job (bench/run.py's ``limits``): within 3 % of none.
    Comparison("drain c=4 soft limit", "drain c=4 no limit", 0.97),
    Comparison("drain c=4 soft limit cpu", "drain c=4 no limit cpu"),
    Comparison("pickup p50 soft limit", "pickup p50 no limit", 1.03, at_least=False),
    Comparison("pickup p99 soft limit", "pickup p99 no limit"),
    # Celery's API over the engine (bench/celery_layer.py): within 10 % of the native calls.
    Comparison("celery: delay()", "celery: native enqueue", 0.9),
    Comparison("celery: drain c=4", "celery: native drain c=4", 0.9),
    # Worker processes (bench/processes.py): on 2 cores, two processes of CPU-bound jobs nearly
    # twice one; the default (one child) as fast as the jobs in the worker's own process; and
    # at least Celery's prefork pool on the same jobs.
    Comparison(f"{PROCESSES_CPU}2", f"{PROCESSES_CPU}1", 1.7),
    Comparison(f"{PROCESSES_NOOP}1", f"{PROCESSES_NOOP}0", 0.95),
    Comparison(f"{PROCESSES_CPU}2", CELERY_PREFORK, 1.0),
    # Recycling every 3 jobs costs little: a child is forked from its generation's template,
    # and started while the one it replaces runs its last jobs.
    Comparison(RECYCLING_DRAIN, f"{PROCESSES_CPU}2", 0.7),
    # Tracing (bench/tracing.py), each mode beside tracing off: the API without an SDK within
    # 2 %, the SDK exporting nowhere within 15 %. The worker's CPU per job, steadier than the
    # rates, and the SDK sampling one trace in ten or making one bare span per job (the SDK's
    # own floor) are shown beside off without a goal.
    *(
        Comparison(tracing_figure(name, mode), tracing_figure(name, "off"), goal)
        for name in ("enqueue", "drain")
        for mode, goal in (("api", 0.98), ("sdk", 0.85), ("sampled", None), ("floor", None))
    ),
    *(
        Comparison(tracing_figure("drain cpu", mode), tracing_figure("drain cpu", "off"))
        for mode in ("api", "sdk", "sampled", "floor")
    ),
)


@dataclass(frozen=True)
class Bound:
    """A count that must stay at or under ``at_most`` in every repetition (a check, not a
    ratio): its largest value is the one judged. Without ``at_most``, shown as measured."""

    figure: str
    at_most: float | None = None

    def met(self, runs: Runs) -> bool | None:
        values = runs.get(self.figure)
        if not values or self.at_most is None:
            return None
        return max(values) <= self.at_most


BOUNDS: tuple[Bound, ...] = (
    Bound("stepskill: django_jobs re-run after stored (n)", 0),
    Bound("stepskill: dbos re-run after stored (n)"),
    Bound("stepskill: django_jobs re-run in all (n)"),
    Bound("stepskill: dbos re-run in all (n)"),
    # The goal is a p50 of 1 s: every repetition within it is stricter.
    Bound(KILL_TO_WORKER_LOST, 1000),
    # A child's start (signal to ready): under 100 ms, forked from the template.
    Bound(CHILD_START, 100),
    Bound(CHILD_FORK, 100),
    # A job lost with its child runs again at once, ahead of the backlog (its place kept).
    Bound(KILL_TO_RUNNING, 1000),
)


def figures_table(runs: Runs) -> str:
    """Every figure: its runs and their median."""
    width = max([28, *(len(name) + 1 for name in runs)])
    head = f"{'figure':<{width}}{'unit':>8}{'median':>10}  runs"
    lines = [head, "-" * (len(head) + 30)]
    for name, values in runs.items():
        if not values:
            continue
        u = unit(name)
        each = " ".join(fmt(v, u) for v in values)
        lines.append(f"{name:<{width}}{u:>8}{fmt(statistics.median(values), u):>10}  {each}")
    return "\n".join(lines)


def side_by_side(runs: Runs, comparisons: tuple[Comparison, ...] = COMPARISONS) -> str:
    """django_jobs beside each peer: both medians, the median ratio, the goal and whether it
    is met. Comparisons missing either figure are left out."""
    shown = [c for c in comparisons if c.ratios(runs)]
    mine_w = max([26, *(len(c.figure) + 1 for c in shown)])
    peer_w = max([28, *(len(c.peer) + 1 for c in shown)])
    head = (
        f"{'django_jobs':<{mine_w}}{'median':>10}  {'beside':<{peer_w}}{'median':>10}"
        f"{'ratio':>8}{'goal':>9}  met"
    )
    lines = [head, "-" * len(head)]
    for c in shown:
        ratios = c.ratios(runs)
        ratio = statistics.median(ratios)
        mine = statistics.median(runs[c.figure])
        theirs = statistics.median(runs[c.peer])
        goal, met = "-", ""
        if c.goal is not None:
            goal = ("≥ " if c.at_least else "≤ ") + f"{c.goal:.2f}"
            met = "yes" if c.met(ratio) else "NO"
        lines.append(
            f"{c.figure:<{mine_w}}{fmt(mine, unit(c.figure)):>10}  {c.peer:<{peer_w}}"
            f"{fmt(theirs, unit(c.peer)):>10}{c.ratio_text(ratio):>8}{goal:>9}  {met}"
        )
    return "\n".join(lines)


def checks_table(runs: Runs, bounds: tuple[Bound, ...] = BOUNDS) -> str:
    """The counts with a bound: the largest of their repetitions, the bound, whether it is
    met. Counts not measured are left out; empty when none was."""
    head = f"{'check':<52}{'max':>6}{'runs':>12}{'goal':>8}  met"
    lines = []
    for b in bounds:
        values = runs.get(b.figure)
        if not values:
            continue
        met = b.met(runs)
        goal = "-" if b.at_most is None else f"≤ {b.at_most:g}"
        verdict = "" if met is None else ("yes" if met else "NO")
        each = " ".join(f"{v:g}" for v in values)
        lines.append(f"{b.figure:<52}{max(values):>6g}{each:>12}{goal:>8}  {verdict}")
    if not lines:
        return ""
    return "\n".join([head, "-" * len(head), *lines])


def goals_met(
    runs: Runs,
    comparisons: tuple[Comparison, ...] = COMPARISONS,
    bounds: tuple[Bound, ...] = BOUNDS,
) -> dict[str, bool]:
    """Each goal measured: "figure / peer" (or a bounded count's figure) -> met."""
    found = {}
    for c in comparisons:
        ratios = c.ratios(runs)
        if c.goal is not None and ratios:
            found[f"{c.figure} / {c.peer}"] = bool(c.met(statistics.median(ratios)))
    for b in bounds:
        met = b.met(runs)
        if met is not None:
            found[b.figure] = met
    return found


# -- a revision beside the working tree (``python -m bench --against REV``) ---------------------

#: Fewer repetitions than this give no verdict: one run has no spread, and two were seen to
#: mark figures of identical code "worse" on a loaded machine.
MIN_RUNS_FOR_VERDICT = 3

#: The rule that marks a figure "worse", as the report prints it.
NOISE_RULE = (
    "ratio: working tree / REV within each repetition (REV / working tree for ms, s and "
    "us/job), so below 1 is always worse; the median of those ratios is shown, with their "
    "min..max.\n"
    "noise: a figure is 'worse' only when every repetition's ratio is below 1 AND the median "
    "ratio is below 1 by more than the figure's run-to-run spread ((max - min) / median of "
    "its repetitions, the larger of REV's and the working tree's); 'better' is the same rule "
    "with the sides swapped; anything else is 'same'. With fewer than "
    f"{MIN_RUNS_FOR_VERDICT} repetitions: no verdict ('-')."
)


def against_ratio(figure: str, work: float, rev: float) -> float:
    """The working tree against REV, oriented so that below 1 is worse: work / rev for a rate,
    rev / work for a time, a latency or a CPU cost."""
    return work / rev if higher_is_better(figure) else rev / work


def against_ratios(figure: str, work: Runs, rev: Runs) -> list[float]:
    """The oriented ratio in each repetition where both sides measured the figure."""
    return [
        against_ratio(figure, w, r)
        for w, r in zip(work.get(figure, []), rev.get(figure, []), strict=False)
        if w and r
    ]


def spread(values: list[float]) -> float:
    """Run-to-run spread: (max - min) / median, 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


@dataclass(frozen=True)
class Versus:
    """One figure of the working tree beside REV's."""

    figure: str
    work: float  # median
    rev: float  # median
    ratios: tuple[float, ...]
    rev_spread: float
    work_spread: float = 0.0

    @property
    def noise(self) -> float:
        """The figure's own run-to-run spread: the larger of the two sides'."""
        return max(self.rev_spread, self.work_spread)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def verdict(self) -> str:
        """One of worse, better, same, or "-" (too few repetitions to judge the noise)."""
        if len(self.ratios) < MIN_RUNS_FOR_VERDICT:
            return "-"
        if max(self.ratios) < 1 and 1 - self.ratio > self.noise:
            return "worse"
        # The same rule with the sides swapped (REV / working tree below 1 by more than the
        # noise): a ratio can grow without bound, and ``ratio - 1 > noise`` would call a
        # latency's p99 of identical code "better" on a loaded machine.
        if min(self.ratios) > 1 and 1 - 1 / self.ratio > self.noise:
            return "better"
        return "same"


def versus(work: Runs, rev: Runs) -> list[Versus]:
    """Every figure both sides measured, in the working tree's order."""
    found = []
    for figure, values in work.items():
        ratios = against_ratios(figure, work, rev)
        if not ratios:
            continue
        found.append(
            Versus(
                figure,
                statistics.median(values),
                statistics.median(rev[figure]),
                tuple(ratios),
                spread(rev[figure]),
                spread(values),
            )
        )
    return found


def against_table(work: Runs, rev: Runs) -> str:
    """Per figure: both medians, the median ratio, its min..max, the noise, the verdict."""
    head = (
        f"{'figure':<28}{'unit':>8}{'working tree':>14}{'REV':>10}{'ratio':>8}"
        f"{'min..max':>14}{'noise':>8}  verdict"
    )
    lines = [head, "-" * len(head)]
    for v in versus(work, rev):
        u = unit(v.figure)
        low_high = f"{min(v.ratios):.2f}..{max(v.ratios):.2f}"
        lines.append(
            f"{v.figure:<28}{u:>8}{fmt(v.work, u):>14}{fmt(v.rev, u):>10}{v.ratio:>8.2f}"
            f"{low_high:>14}{v.noise:>8.0%}  {v.verdict}"
        )
    return "\n".join(lines)
