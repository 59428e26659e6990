"""Job kinds of the test suite, loaded under the test settings only (``testproject.settings``).

Add a test kind here. The demo (``testproject.demo_settings``) does not install this app, so
none of these kinds shows in its admin; the demo's own kinds are in ``testproject/demo/jobs.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from asgiref.sync import sync_to_async
from django.dispatch import receiver
from rest_framework import serializers

from django_jobs import Retry, job
from django_jobs.signals import children_spawned

# The demo's kinds live in ``testproject.demo.jobs`` (the demo loads only those); imported
# here, they stay importable from this module.
from .demo.jobs import hello, publish, render  # noqa: F401
from .models import Execution

# A worker process that cannot start (a broken import), while this file exists: the supervisor
# keeps restarting it (or the template it forks from) with backoff
# (tests/integration/test_supervisor_processes.py).
_broken = os.environ.get("JOBS_TEST_BROKEN")
_child = "--child-report-fd" in sys.argv or "--child-template-fd" in sys.argv
if _broken and _child and os.path.exists(_broken):
    raise ImportError("a broken import, for the supervisor's tests (JOBS_TEST_BROKEN exists)")

# A project that leaves a socket open at import (a client connected at module level): its
# template will not fork, and the supervisor starts its worker processes as new interpreters.
if os.environ.get("JOBS_TEST_SOCKET_AT_IMPORT") and "--child-template-fd" in sys.argv:
    import socket

    _left_open = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

# --- kinds used by the test suite -----------------------------------------------------------


def _record(ctx, label: str) -> None:
    Execution.objects.create(job_id=ctx.job.pk, label=label, pid=os.getpid(), attempt=ctx.attempt)


@job("test.noop", idempotency_key="payload")
def noop(ctx):
    return None


@job("test.record", idempotency_key="payload")
def record(ctx):
    _record(ctx, "record")
    return {"n": ctx.payload.get("n") if isinstance(ctx.payload, dict) else None}


@job(
    "test.fail",
    idempotency_key="payload",
    retry=Retry(attempts=3, backoff="exponential", delay="10s", jitter=False),
)
def always_fail(ctx):
    _record(ctx, "fail")
    raise RuntimeError("boom " + "x" * int((ctx.payload or {}).get("pad", 0)))


@job("test.requeue", idempotency_key="payload")
def keeps_requeueing(ctx):
    _record(ctx, "requeue")
    return ctx.requeue("waiting for the warehouse", after="1h")


@job("test.bad_result", idempotency_key="payload", retry=Retry(attempts=1))
def bad_result(ctx):
    return {"when": object()}


_late_handler: logging.Handler | None = None


@job("test.logs", idempotency_key="payload", retry=Retry(attempts=1))
def logs(ctx):
    """Logs a warning. Its first run in a process adds a handler of its own first (one added
    after the worker started) whose format names the job's fields
    (tests/integration/test_worker_logging.py)."""
    global _late_handler
    log = logging.getLogger("testproject.logs")
    if _late_handler is None:
        _late_handler = logging.StreamHandler()
        _late_handler.setFormatter(
            logging.Formatter(
                "late handler: job_id=%(job_id)s kind=%(kind)s attempt=%(attempt)s "
                "queue=%(queue)s %(message)s"
            )
        )
        log.addHandler(_late_handler)
    log.warning("logged by the job %s", ctx.payload["n"])


@job("test.async", idempotency_key="payload")
async def async_job(ctx):
    await ctx.alog("async says hi")
    await ctx.aprogress("half", 50)
    return {"async": True, "payload": ctx.payload}


class OrderInput(serializers.Serializer):
    order = serializers.IntegerField(min_value=1)


@job(
    "test.validated",
    idempotency_key=lambda p: f"order:{p['order']}",
    input=OrderInput,
    member_safe=True,
)
def validated(ctx):
    return {"order": ctx.payload["order"]}


@job("test.slow", idempotency_key="payload", retry=Retry(attempts=5, delay="1s", jitter=False))
def slow(ctx):
    """Runs until the file named in the payload exists (or ``seconds`` pass), then succeeds."""
    _record(ctx, "slow-start")
    marker = Path(ctx.payload["until"]) if ctx.payload.get("until") else None
    deadline = time.monotonic() + float(ctx.payload.get("seconds", 30))
    while time.monotonic() < deadline and not (marker and marker.exists()):
        time.sleep(0.02)
    _record(ctx, "slow-end")
    return {"slow": True}


@job("test.every_call", idempotency_key="call", retry=Retry(attempts=1))
def every_call(ctx):
    """Keyed "call": its effect (an ``Execution`` row) once per enqueue, then it runs until the
    file named in the payload exists."""
    _record(ctx, f"every_call:{ctx.payload['change']}")
    _wait_for_file(ctx.payload["until"])
    return ctx.payload["change"]


@job("test.busy", idempotency_key="payload", retry=Retry(attempts=1))
def busy(ctx):
    """Pure Python until the file named in the payload exists: frames made and freed without a
    pause, what a stack dump must read safely."""
    _record(ctx, "busy-start")
    marker = Path(ctx.payload["until"])
    rounds = 0
    while not marker.exists():
        for _ in range(100):
            rounds += _nested(20)
    return {"rounds": rounds}


def _nested(depth: int) -> int:
    return sum(n for n in range(10)) if depth == 0 else _nested(depth - 1)


@job("test.hard_limit", idempotency_key="payload", time_limit="2s", retry=Retry(attempts=1))
def past_its_hard_limit(ctx):
    """Sleeps in one C call far past its hard limit: only ending its process stops it."""
    _record(ctx, "hard-limit-start")
    time.sleep(float(ctx.payload.get("seconds", 60)))
    _record(ctx, "hard-limit-after-sleep")


@job("test.hard_limit_async", idempotency_key="payload", time_limit="2s", retry=Retry(attempts=1))
async def async_past_its_hard_limit(ctx):
    """An ``async def`` runner stuck in a blocking call: its event loop never gets it back."""
    await sync_to_async(_record, thread_sensitive=False)(ctx, "hard-limit-start")
    time.sleep(float(ctx.payload.get("seconds", 60)))  # blocking, inside the coroutine
    await sync_to_async(_record, thread_sensitive=False)(ctx, "hard-limit-after-sleep")


@job("test.exit", idempotency_key="payload", retry=Retry(attempts=2, delay=0, jitter=False))
def exits(ctx):
    """Calls ``sys.exit`` as a script (or a library) might: the attempt fails, the worker stays."""
    _record(ctx, "exit")
    sys.exit(3)


@job("test.interrupt", idempotency_key="payload", retry=Retry(attempts=1))
def interrupts(ctx):
    """Raises ``KeyboardInterrupt``: it ends the executor thread that runs it."""
    _record(ctx, "interrupt")
    raise KeyboardInterrupt


@job("test.fleet", idempotency_key="payload", engine="fleet")
def fleet(ctx):
    _record(ctx, "fleet")


@job("test.until_cancelled", idempotency_key="payload", retry=Retry(attempts=1))
def until_cancelled(ctx):
    """Looks at ``ctx.cancelled`` every 0.1 s for up to ``seconds`` (default 60), then returns."""
    _record(ctx, "until-cancelled-start")
    deadline = time.monotonic() + float((ctx.payload or {}).get("seconds", 60))
    while time.monotonic() < deadline:
        if ctx.cancelled:
            _record(ctx, "until-cancelled-saw-cancel")
            return {"stopped": "cancelled"}
        time.sleep(0.1)
    return {"stopped": "time"}


# --- kinds used by the REST API tests (django_jobs.api) --------------------------------------


class ReportInput(serializers.Serializer):
    title = serializers.CharField(max_length=100)


@job(
    "api.report",
    idempotency_key="payload",
    label="Report",
    group="Demo",
    member_safe=True,
    schedulable=True,
    input=ReportInput,
)
def report(ctx):
    ctx.log(f"report {ctx.payload['title']}")
    return {"report": ctx.payload["title"]}


@job("api.steps", idempotency_key="payload", retry=Retry(attempts=1))
def with_steps(ctx):
    ctx.log("fetching")
    fetched = ctx.step.run("fetch", lambda: {"n": 1})
    ctx.step.run("store", lambda: fetched["n"] + 1)
    if ctx.payload.get("fail"):
        raise RuntimeError("store refused")
    return {"stored": True}


# --- kinds used by the durable-steps process tests -------------------------------------------


def _wait_for_file(path: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not Path(path).exists():
        time.sleep(0.02)


@job(
    "steps.atomic_then_pause",
    idempotency_key="payload",
    retry=Retry(attempts=3, delay=0, jitter=False),
)
def atomic_then_pause(ctx):
    """Writes a row in an atomic step, then blocks outside any step until a file appears."""

    def write():
        Execution.objects.create(job_id=ctx.job.pk, label="atomic-write", pid=os.getpid())
        return "written"

    ctx.step.atomic("write", write)
    _record(ctx, "after-atomic")
    _wait_for_file(ctx.payload["until"])
    return ctx.step.run("finish", lambda: "finished")


@job("steps.charge", idempotency_key="payload", retry=Retry(attempts=3, delay=0, jitter=False))
def charge(ctx):
    """An activity that blocks until a file appears; ``recover`` comes from the payload."""

    def activity(info):
        Execution.objects.create(
            job_id=ctx.job.pk,
            label=f"charge key={info.key} interrupted={info.interrupted} attempt={info.attempt}",
            pid=os.getpid(),
        )
        _wait_for_file(ctx.payload["until"])
        return {"charged": True}

    return ctx.step.run("charge", activity, recover=ctx.payload["recover"])


@job("steps.cool", idempotency_key="payload")
def cool(ctx):
    _record(ctx, "before-sleep")
    ctx.step.sleep("cool", "3d")
    _record(ctx, "after-sleep")
    return "cooled"


#: The steps of ``counted_steps``.
COUNTED_STEPS = ("one", "two", "three")


@job("steps.counted", idempotency_key="payload", retry=Retry(attempts=5, delay=0, jitter=False))
def counted_steps(ctx):
    """Three plain steps whose bodies each leave an ``Execution`` row (its label: the step's
    name), committed before the body returns: every run of a body, counted durably."""

    def body(name):
        def run():
            Execution.objects.create(job_id=ctx.job.pk, label=name, pid=os.getpid())

        return run

    for name in COUNTED_STEPS:
        ctx.step.run(name, body(name))


# --- kinds used by the live events tests (django_jobs.events) --------------------------------


@job("events.count", idempotency_key="payload", member_safe=True, label="Count to 100")
def count_to_100(ctx):
    """Progress 0, 10, ..., 100, ``pause`` seconds apart; at ``hold_at`` percent it waits for
    the file ``until`` (when given) before going on."""
    pause = float(ctx.payload.get("pause", 0.1))
    for percent in range(0, 101, 10):
        ctx.progress("counting", percent)
        if ctx.payload.get("until") and percent == ctx.payload.get("hold_at", 50):
            _wait_for_file(ctx.payload["until"], seconds=60)
        time.sleep(pause)
    ctx.log("counted to 100")
    return {"counted": 100}


# --- kinds used by the runner-fault tests (tests/faults, docs/reliability.md) -----------------


@job("faults.hang", idempotency_key="payload", timeout="1s", retry=Retry(attempts=1))
def hangs(ctx):
    """Ignores its 1 s timeout until the file ``until`` exists: never checks
    ``ctx.cancelled``, and swallows each ``JobTimeout`` raised in it and waits on."""
    from django_jobs import JobTimeout

    _record(ctx, "hang-start")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not Path(ctx.payload["until"]).exists():
        try:
            time.sleep(0.02)
        except JobTimeout:
            pass
    _record(ctx, "hang-end")
    return {"late": True}


@job("faults.hog", idempotency_key="payload", retry=Retry(attempts=1))
def hogs(ctx):
    """Allocates 16 MB at a time until ``MemoryError`` (or ``max_mb``, a safety bound)."""
    _record(ctx, "hog")
    chunks = []
    for _ in range(int(ctx.payload.get("max_mb", 1024)) // 16):
        chunks.append(bytearray(16 * 1024 * 1024))
    return {"allocated_mb": 16 * len(chunks)}


@job("faults.exit_process", idempotency_key="payload", retry=Retry(attempts=1))
def exits_process(ctx):
    """Ends the whole worker process at once, as a crash or a C extension's abort would."""
    _record(ctx, "exit-process")
    os._exit(int(ctx.payload.get("code", 7)))


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


@job("faults.raise_in_except", idempotency_key="payload", retry=Retry(attempts=1))
def raises_in_except(ctx):
    """Raises while handling another exception; with ``unprintable``, one whose str() fails."""
    _record(ctx, "raise-in-except")
    try:
        raise KeyError("the first error")
    except KeyError:
        if ctx.payload.get("unprintable"):
            raise _Unprintable() from None
        raise ValueError("raised while handling the first error") from None


# --- kinds used by the bad-input tests (stored JSON text is validated) -----------------------


@job("bad_input.result_surrogate", idempotency_key="payload", retry=Retry(attempts=1))
def result_surrogate(ctx):
    return {"text": "lone \ud800"}


@job("bad_input.result_nul", idempotency_key="payload", retry=Retry(attempts=1))
def result_nul(ctx):
    return ["a\x00b"]


@job("bad_input.result_deep", idempotency_key="payload", retry=Retry(attempts=1))
def result_deep(ctx):
    value: object = 1
    for _ in range(200):
        value = [value]
    return value


@job("bad_input.step_surrogate", idempotency_key="payload", retry=Retry(attempts=1))
def step_surrogate(ctx):
    ctx.step.run("poison", lambda: {"\ud800": 1})
    return "unreachable"


@job("bad_input.log_surrogate", idempotency_key="payload")
def log_surrogate(ctx):
    ctx.log("lone \ud800 and nul \x00 kept visible")
    return None


@job("bad_input.raise_bad_text", idempotency_key="payload", retry=Retry(attempts=1))
def raise_bad_text(ctx):
    raise RuntimeError("lone \ud800 and nul \x00 in a message")


@job("bad_input.requeue_bad_text", idempotency_key="payload")
def requeue_bad_text(ctx):
    return ctx.requeue("waiting on \x00\ud800", after="1h")


# --- kinds used by the fleet fault loops (tests/faults: kill -9, outages, a silent network) ---


@job(
    "faults.three_steps",
    idempotency_key="payload",
    retry=Retry(attempts=10, delay=0, jitter=False),
)
def three_steps(ctx):
    """Three durable steps; the middle one counts its effect (an ``Execution`` row) atomically.

    ``pause``: seconds the first activity takes, so that faults land in the middle of jobs.
    ``hold``: a file the first attempt waits for, inside the step named by ``hold_in`` (the
    first, or the atomic ``effect``: then inside its transaction), after touching ``entered``.
    """

    def hold(step: str) -> None:
        if (
            ctx.payload.get("hold")
            and ctx.attempt == 1
            and ctx.payload.get("hold_in", "first") == step
        ):
            if ctx.payload.get("entered"):
                Path(ctx.payload["entered"]).touch()
            _wait_for_file(ctx.payload["hold"], seconds=120)

    def first():
        hold("first")
        time.sleep(float(ctx.payload.get("pause", 0)))
        return {"pid": os.getpid(), "attempt": ctx.attempt}

    def effect():
        Execution.objects.create(
            job_id=ctx.job.pk, label="effect", pid=os.getpid(), attempt=ctx.attempt
        )
        hold("effect")
        return {"pid": os.getpid()}

    return {
        "first": ctx.step.run("first", first),
        "effect": ctx.step.atomic("effect", effect),
        "last": ctx.step.run("last", lambda: {"pid": os.getpid()}),
    }


# --- kinds used by the workflow tests --------------------------------------------------------


@job("workflow.square", idempotency_key="payload", retry=Retry(attempts=1))
def square(ctx):
    """A child: n squared. ``until``: first wait for that file; ``fail``: raise instead."""
    _record(ctx, f"square:{ctx.payload['n']}")
    if ctx.payload.get("until"):
        _wait_for_file(ctx.payload["until"])
    if ctx.payload.get("fail"):
        raise RuntimeError(f"square {ctx.payload['n']} was asked to fail")
    return ctx.payload["n"] ** 2


@job("workflow.fan", idempotency_key="payload", retry=Retry(attempts=3, delay=0, jitter=False))
def fan(ctx):
    """Spawns one ``workflow.square`` per item of ``children`` and gathers them."""
    ids = ctx.step.spawn("children", square, ctx.payload["children"])
    results = ctx.step.gather("gathered", ids)
    _record(ctx, "after-gather")
    return results


@job("workflow.pair", idempotency_key="payload", retry=Retry(attempts=1))
def pair(ctx):
    """Two children on two queues (so two workers can each take one), then gathers both."""
    left = ctx.step.spawn("left", square, ctx.payload["left"], queue="wf-left")
    right = ctx.step.spawn("right", square, ctx.payload["right"], queue="wf-right")
    results = ctx.step.gather("gathered", left + right)
    _record(ctx, "after-gather")
    return results


@job(
    "workflow.spawn_then_pause",
    idempotency_key="payload",
    retry=Retry(attempts=5, delay=0, jitter=False),
)
def spawn_then_pause(ctx):
    """As ``workflow.fan``; on its first ``kills`` attempts its spawn pauses inside the step's
    transaction, after the insert (see ``_pause_inside_spawn``)."""
    ids = ctx.step.spawn("children", square, ctx.payload["children"])
    results = ctx.step.gather("gathered", ids)
    _record(ctx, "after-gather")
    return results


@receiver(children_spawned)
def _pause_inside_spawn(sender, parent, children, **kwargs):
    # The children are inserted, the step not yet recorded, nothing committed: the file
    # "spawned-<attempt>" tells the test, which then kills the worker. The first ``kills``
    # attempts pause so (default 1).
    if parent.kind != "workflow.spawn_then_pause":
        return
    if parent.attempts > parent.payload.get("kills", 1):
        return
    spawned = Path(f"{parent.payload['spawned']}-{parent.attempts}")
    # Written whole, then renamed: the test reads the ids as soon as the name exists.
    partial = spawned.with_name(spawned.name + ".partial")
    partial.write_text(",".join(str(c.pk) for c in children))
    os.replace(partial, spawned)
    _wait_for_file(parent.payload["until"], seconds=60)


# --- kinds used by the canvas tests (chain, group, hooks, self re-enqueue) ------------------


def _effect(ctx, label: str) -> None:
    """One durable side effect per member: an Execution row written in an atomic step, so a
    member killed and run again still writes it exactly once."""
    ctx.step.atomic(
        "effect",
        lambda: (
            Execution.objects.create(
                job_id=ctx.job.pk, label=label, pid=os.getpid(), attempt=ctx.attempt
            ).pk
        ),
    )


class AddInput(serializers.Serializer):
    n = serializers.IntegerField()
    until = serializers.CharField(required=False)
    fail = serializers.BooleanField(required=False, default=False)
    pause = serializers.FloatField(required=False, default=0)


@job(
    "canvas.add",
    idempotency_key="payload",
    input=AddInput,
    retry=Retry(attempts=3, delay=0, jitter=False),  # a kill -9 costs the run it cut off
)
def canvas_add(ctx):
    """``n`` plus the previous result (0 first); ``until``: wait for that file before the
    effect; ``fail``: raise; ``pause``: sleep that many seconds first (a slower member)."""
    if ctx.payload.get("until"):
        _wait_for_file(ctx.payload["until"], seconds=60)
    if ctx.payload.get("fail"):
        raise RuntimeError(f"canvas.add {ctx.payload['n']} was asked to fail")
    time.sleep(ctx.payload.get("pause") or 0)
    _effect(ctx, f"canvas.add:{ctx.payload['n']}")
    previous = ctx.previous if isinstance(ctx.previous, int) else 0
    return previous + ctx.payload["n"]


@job("canvas.total", idempotency_key="payload", retry=Retry(attempts=1))
def canvas_total(ctx):
    """A chord's callback: the sum of the group's results (``ctx.previous``)."""
    _effect(ctx, f"canvas.total:{ctx.payload.get('tag', '')}")
    return {"sum": sum(ctx.previous), "count": len(ctx.previous)}


@job("canvas.echo", idempotency_key="payload", retry=Retry(attempts=1))
def canvas_echo(ctx):
    """Returns what it got: its payload and ``ctx.previous``."""
    return {"payload": ctx.payload, "previous": ctx.previous}


@job(
    "canvas.batch",
    idempotency_key=lambda p: f"batch:{p['name']}",
    retry=Retry(attempts=1),
)
def canvas_batch(ctx):
    """A batch loop, as Celery codebases write it: do one batch, then enqueue itself again.
    ``after_current``: pass it (else: the call raises JobDuplicate)."""
    _record(ctx, f"batch:{ctx.payload['left']}")
    if ctx.payload["left"] > 1:
        canvas_batch.enqueue(
            {**ctx.payload, "left": ctx.payload["left"] - 1},
            after_current=ctx.payload.get("after_current", True),
        )
    return ctx.payload["left"]


def _hook_file(job, name: str, exc) -> None:
    directory = (job.payload or {}).get("hooks")
    if directory:
        line = f"{name} {job.pk} {job.state} {type(exc).__name__ if exc else None} {exc}\n"
        with open(Path(directory) / "hooks.log", "a") as f:
            f.write(line)


@job(
    "canvas.hooked",
    idempotency_key="payload",
    retry=Retry(attempts=2, delay=0, jitter=False),
    on_success=lambda job, exc: _hook_file(job, "success", exc),
    on_failure=lambda job, exc: _hook_file(job, "failure", exc),
    on_retry=lambda job, exc: _hook_file(job, "retry", exc),
)
def canvas_hooked(ctx):
    """Hooks write a line each to ``hooks``/hooks.log; ``fail``: raise (with the attempt and
    ``ctx.is_last_attempt`` in the message)."""
    if ctx.payload.get("fail"):
        raise ValueError(f"attempt {ctx.attempt} last={ctx.is_last_attempt}")
    return ctx.attempt


# --- kinds of the time-limit tests (tests/store/test_time_limits.py,
# tests/integration/test_time_limits_processes.py) --------------------------------------------


@job("limits.loop", idempotency_key="payload", timeout="1s", retry=Retry(attempts=1))
def loops_past_its_timeout(ctx):
    """Pure Python past its 1 s soft limit; ``catch``: catches the ``JobTimeout`` raised in it,
    cleans up and returns how long after its start it landed."""
    from django_jobs import JobTimeout

    began = time.monotonic()
    _record(ctx, "limits-loop-start")
    try:
        _spin()
    except JobTimeout:
        landed = time.monotonic() - began
        _record(ctx, "limits-loop-cleanup")
        if ctx.payload.get("catch"):
            return {"landed_after": landed}
        raise


def _spin() -> None:
    """Pure Python forever (its caller holds the ``except``: docs/operating.md says why)."""
    rounds = 0
    while rounds >= 0:
        rounds += 1


@job("limits.sleep", idempotency_key="payload", timeout="1s", retry=Retry(attempts=1))
def sleeps_past_its_timeout(ctx):
    """``sleep(limit + 1)``, then the effect: the soft limit's ``JobTimeout`` lands as the
    sleep returns, before the effect."""
    _record(ctx, "limits-sleep-start")
    time.sleep(2.0)
    _record(ctx, "limits-sleep-effect")


@job("limits.hard_sleep", idempotency_key="payload", time_limit="2s", retry=Retry(attempts=1))
def sleeps_past_its_time_limit(ctx):
    """``sleep(limit + 1)``, then the effect, with only a hard limit."""
    _record(ctx, "limits-hard-sleep-start")
    time.sleep(3.0)
    _record(ctx, "limits-hard-sleep-effect")


@job("limits.async_sleep", idempotency_key="payload", timeout="1s", retry=Retry(attempts=1))
async def async_sleeps_past_its_timeout(ctx):
    """An ``async def`` runner past its soft limit: cancelled in its ``await``."""
    import asyncio

    await sync_to_async(_record, thread_sensitive=False)(ctx, "limits-async-start")
    await asyncio.sleep(3.0)
    await sync_to_async(_record, thread_sensitive=False)(ctx, "limits-async-effect")


@job("limits.blocked", idempotency_key="payload", time_limit="2s", retry=Retry(attempts=1))
def blocked_in_c(ctx):
    """Blocked in one C call far past its hard limit: only ending its process stops it."""
    import select

    _record(ctx, "limits-blocked-start")
    select.select([], [], [], float(ctx.payload.get("seconds", 60)))
    _record(ctx, "limits-blocked-effect")


@job("limits.steady", idempotency_key="payload", retry=Retry(attempts=3, delay=0, jitter=False))
def steady(ctx):
    """A sibling of another kind: runs ``seconds``, or until the file ``until`` exists; each
    start and end recorded with its attempt."""
    _record(ctx, "limits-steady-start")
    deadline = time.monotonic() + float(ctx.payload.get("seconds", 60))
    marker = Path(ctx.payload["until"]) if ctx.payload.get("until") else None
    while time.monotonic() < deadline and not (marker and marker.exists()):
        time.sleep(0.02)
    _record(ctx, "limits-steady-end")
    return ctx.attempt


@job("history.flaky", idempotency_key="payload", retry=Retry(attempts=3, delay=0, jitter=False))
def fails_once(ctx):
    """Fails its first attempt, succeeds the next: both show in the job's attempt history."""
    _record(ctx, "flaky")
    if ctx.attempt == 1:
        raise ValueError("the first attempt fails\nsecond line of the message")
    return "ok"
