"""OpenTelemetry tracing (SPEC §16): spans exported to memory by the SDK, jobs run in-process.

Each test passes its own ``TracerProvider`` (``tracing.configure``); the module is skipped
when ``opentelemetry-sdk`` is not installed (the ``test`` extra installs it).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase, override_settings
from django.test.utils import CaptureQueriesContext

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from django_jobs import Retry, job, schedule
from django_jobs.engine.observe import tracing
from django_jobs.engine.observe.records import add_job_fields
from django_jobs.engine.schedules import undeclare
from django_jobs.engine.worker.worker import Worker
from django_jobs.kinds.registry import unregister
from django_jobs.models import Job
from django_jobs.observability.tracing import JobLogFilter
from django_jobs.testing import fire_schedules, run_until_idle
from testproject.jobs import noop
from testproject.tasks import add

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)

#: A provider named by its import string in JOBS["TRACER_PROVIDER"].
SETTING_EXPORTER = InMemorySpanExporter()
SETTING_PROVIDER = TracerProvider()
SETTING_PROVIDER.add_span_processor(SimpleSpanProcessor(SETTING_EXPORTER))


def needs_file_database() -> None:
    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite" and ("mode=memory" in name or name in ("", ":memory:")):
        pytest.skip("the worker's threads need a file or server database (SQLITE_TEST_PATH)")


def traceparent(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


class Traced(TestCase):
    """A TracerProvider exporting to memory per test; throwaway kinds removed afterwards."""

    def setUp(self):
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        tracing.configure(tracer_provider=self.provider)
        self.addCleanup(tracing.configure, None)
        self.tracer = self.provider.get_tracer("tests")
        self.kinds: list[str] = []
        self.traveller = time_machine.travel(T0, tick=False)
        self.clock = self.traveller.start()
        self.addCleanup(self.traveller.stop)

    def tearDown(self):
        for kind in self.kinds:
            unregister(kind)

    def define(self, kind, func, **options):
        self.kinds.append(kind)
        options.setdefault("idempotency_key", "payload")
        options.setdefault("retry", Retry(attempts=3, delay=0, jitter=False))
        return job(kind, **options)(func)

    def spans(self, name=None):
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def one(self, name):
        [span] = self.spans(name)
        return span


class SendTests(Traced):
    def test_an_enqueue_is_a_producer_span_whose_context_the_row_stores(self):
        task = self.define("tr.one", lambda ctx: None, queue="mail")
        created = task.enqueue({"n": 1})
        send = self.one("send mail")
        assert send.kind == SpanKind.PRODUCER
        assert dict(send.attributes) == {
            "messaging.system": "django_jobs",
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": "mail",
            "messaging.django_jobs.kind": "tr.one",
            "messaging.message.id": str(created.pk),
        }
        again = task.enqueue({"n": 1})  # deduped onto the live job: its context stays
        assert again.deduped and again.pk == created.pk
        [_, dedupe] = self.spans("send mail")
        assert dedupe.attributes["messaging.django_jobs.deduped"] is True
        assert dedupe.attributes["messaging.message.id"] == str(created.pk)
        stored = Job.objects.get(pk=created.pk).trace_context
        assert stored == {"traceparent": traceparent(send)}
        assert created.trace_context == stored  # the job returned is the row as inserted

    def test_the_send_span_is_a_child_of_the_callers_span_and_keeps_its_tracestate(self):
        task = self.define("tr.child", lambda ctx: None)
        with self.tracer.start_as_current_span("request") as request:
            created = task.enqueue({"n": 1})
        send = self.one("send default")
        assert send.parent.span_id == request.get_span_context().span_id
        assert send.context.trace_id == request.get_span_context().trace_id
        stored = Job.objects.get(pk=created.pk).trace_context
        assert set(stored) == {"traceparent"}  # no tracestate was set; never baggage

    def test_enqueue_many_is_one_send_span_and_every_row_stores_it(self):
        task = self.define("tr.many", lambda ctx: None)
        jobs = task.enqueue_many([{"n": n} for n in range(3)])
        send = self.one("send default")
        assert send.attributes["messaging.batch.message_count"] == 3
        assert "messaging.message.id" not in send.attributes
        stored = {str(j.trace_context) for j in Job.objects.filter(pk__in=[j.pk for j in jobs])}
        assert stored == {str({"traceparent": traceparent(send)})}

    def test_a_rolled_back_enqueue_leaves_no_row_and_no_stored_context(self):
        task = self.define("tr.rollback", lambda ctx: None)
        with pytest.raises(RuntimeError), transaction.atomic():
            task.enqueue({"n": 1})
            raise RuntimeError("the caller's transaction fails")
        assert not Job.objects.filter(kind="tr.rollback").exists()
        assert run_until_idle() == []

    def test_without_a_provider_nothing_is_stored(self):
        tracing.configure(None)  # the global provider: OpenTelemetry's proxy, no SDK set
        assert not tracing.enabled()
        task = self.define("tr.off", lambda ctx: None)
        created = task.enqueue({"n": 1})
        assert Job.objects.get(pk=created.pk).trace_context is None
        run_until_idle()
        assert self.spans() == []

    def test_the_global_provider_is_used_once_one_is_set(self):
        tracing.configure(None)
        task = self.define("tr.global", lambda ctx: None)
        assert task.enqueue({"n": 1}).trace_context is None
        with pytest.MonkeyPatch.context() as patch:
            # What trace.set_tracer_provider() does (it may be called once per process).
            patch.setattr(trace, "_TRACER_PROVIDER", self.provider)
            created = task.enqueue({"n": 2})
        assert created.trace_context == {"traceparent": traceparent(self.one("send default"))}

    def test_the_setting_names_a_provider_by_its_import_string(self):
        tracing.configure(None)
        SETTING_EXPORTER.clear()
        task = self.define("tr.setting", lambda ctx: None)
        with override_settings(JOBS={"TRACER_PROVIDER": f"{__name__}.SETTING_PROVIDER"}):
            created = task.enqueue({"n": 1})
        [send] = SETTING_EXPORTER.get_finished_spans()
        assert created.trace_context == {"traceparent": traceparent(send)}
        assert self.spans() == []  # not the provider of the other tests

    def test_a_schedule_occurrence_starts_its_own_trace_named_for_the_schedule(self):
        self.addCleanup(undeclare, "tr.nightly")
        schedule("tr.nightly", every="1m", job=noop)
        with self.tracer.start_as_current_span("ambient"):
            fire_schedules()  # first sync: nothing before it fires
            self.clock.shift(timedelta(minutes=1))
            [fired] = fire_schedules()
        send = self.one("send tr.nightly")
        assert send.kind == SpanKind.PRODUCER
        assert send.parent is None  # a root, not a child of the ambient span
        assert send.attributes["messaging.django_jobs.schedule"] == "tr.nightly"
        assert send.attributes["messaging.destination.name"] == fired.queue
        assert Job.objects.get(pk=fired.pk).trace_context == {"traceparent": traceparent(send)}


class ProcessTests(Traced):
    def test_the_first_attempt_is_a_child_of_the_send_span_and_links_to_it(self):
        task = self.define("tr.run", lambda ctx: "ok", queue="mail")
        created = task.enqueue({"n": 1})
        with self.tracer.start_as_current_span("the worker's own"):
            run_until_idle()
        send, process = self.one("send mail"), self.one("process mail")
        assert process.kind == SpanKind.CONSUMER
        assert process.parent.span_id == send.context.span_id  # never the worker's ambient span
        assert process.context.trace_id == send.context.trace_id
        assert [link.context.span_id for link in process.links] == [send.context.span_id]
        assert dict(process.attributes) == {
            "messaging.system": "django_jobs",
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": "mail",
            "messaging.message.id": str(created.pk),
            "messaging.django_jobs.kind": "tr.run",
            "messaging.django_jobs.attempt": 1,
            "messaging.django_jobs.outcome": "succeeded",
        }
        assert process.status.status_code == StatusCode.UNSET

    def retried(self):
        calls = []

        def flaky(ctx):
            calls.append(ctx.attempt)
            if len(calls) == 1:
                raise ValueError("first attempt fails")
            return "ok"

        task = self.define("tr.retry", flaky)
        created = task.enqueue({"n": 1})
        ran = run_until_idle()
        assert [j.state for j in ran] == ["queued", "succeeded"]
        first, second = sorted(self.spans("process default"), key=lambda s: s.start_time)
        return created, self.one("send default"), first, second

    def test_a_retry_is_a_new_root_linked_to_the_enqueue_and_the_first_attempt(self):
        created, send, first, second = self.retried()
        assert first.parent.span_id == send.context.span_id
        assert first.status.status_code == StatusCode.ERROR
        assert first.attributes["error.type"] == "ValueError"
        [retry] = [e for e in first.events if e.name == "retry"]
        assert retry.attributes["reason"] == "ValueError: first attempt fails"
        assert second.parent is None
        assert second.context.trace_id != send.context.trace_id
        assert second.attributes["messaging.django_jobs.attempt"] == 2
        assert [(link.context.span_id, link.attributes["messaging.django_jobs.link"])
                for link in second.links] == [
            (send.context.span_id, "send"),
            (first.context.span_id, "previous_attempt"),
        ]  # fmt: skip
        stored = Job.objects.get(pk=created.pk).trace_context
        assert stored == {"traceparent": traceparent(send), "previous": traceparent(first)}

    @override_settings(JOBS={"TRACE_RELATIONSHIP": "child"})
    def test_child_makes_every_attempt_a_child_of_the_send_span(self):
        _, send, first, second = self.retried()
        assert first.parent.span_id == second.parent.span_id == send.context.span_id
        assert second.links[-1].context.span_id == first.context.span_id

    @override_settings(JOBS={"TRACE_RELATIONSHIP": "link"})
    def test_link_makes_every_attempt_a_root_linked_to_the_send_span(self):
        _, send, first, second = self.retried()
        assert first.parent is None and second.parent is None
        assert [link.context.span_id for link in first.links] == [send.context.span_id]

    def test_a_final_failure_has_error_status_and_the_qualified_exception_type(self):
        class PaymentDeclined(Exception):
            pass

        def fails(ctx):
            raise PaymentDeclined("card declined")

        task = self.define("tr.fails", fails, retry=Retry(attempts=1))
        task.enqueue({"n": 1})
        [ended] = run_until_idle()
        assert ended.state == "failed"
        process = self.one("process default")
        assert process.status.status_code == StatusCode.ERROR
        assert process.attributes["error.type"] == (
            f"{__name__}.ProcessTests."
            "test_a_final_failure_has_error_status_and_the_qualified_exception_type."
            "<locals>.PaymentDeclined"
        )
        assert [e.name for e in process.events] == ["exception"]

    def test_a_malformed_stored_context_is_ignored_new_root_no_error(self):
        task = self.define("tr.bad", lambda ctx: "ok")
        for stored in ({"traceparent": "00-not-a-context"}, "text", {"traceparent": 7}, []):
            created = task.enqueue({"n": str(stored)})
            Job.objects.filter(pk=created.pk).update(trace_context=stored)
        ran = run_until_idle()
        assert [j.state for j in ran] == ["succeeded"] * 4
        processes = self.spans("process default")
        assert len(processes) == 4
        assert all(p.parent is None and not p.links for p in processes)

    def test_wait_sleep_and_cancel_are_events_with_a_reason(self):
        def sleeper(ctx):
            ctx.step.sleep("nap", "1m")
            return ctx.requeue("the bank is closed", after="1h") if ctx.attempt else None

        task = self.define("tr.sleep", sleeper)
        created = task.enqueue({"n": 1})
        run_until_idle()
        self.clock.shift(timedelta(minutes=2))
        run_until_idle()
        first, second = sorted(self.spans("process default"), key=lambda s: s.start_time)
        [nap] = first.events
        assert nap.name == "sleep"
        assert nap.attributes["reason"].startswith("sleeping in step 'nap' until")
        [wait] = second.events  # the sleep ended: its step completes, no replay
        assert (wait.name, wait.attributes["reason"]) == ("wait", "the bank is closed")
        # A resumed attempt links to the execution before it, in the enqueue's trace.
        assert second.links[-1].context.span_id == first.context.span_id
        assert Job.objects.get(pk=created.pk).state == "waiting"

        def cancelled(ctx):
            Job.objects.filter(pk=ctx.job.pk).update(cancel_requested=True)
            ctx.live.cancel_requested = True
            ctx.check_cancelled()

        self.define("tr.cancel", cancelled).enqueue({"n": 1})
        [ended] = run_until_idle()
        assert ended.state == "cancelled"
        [cancel] = [e for e in self.spans("process default")[-1].events if e.name == "cancel"]
        assert cancel.attributes["reason"].startswith("CANCELLED")

    def test_an_expired_job_gets_an_expired_event_in_its_trace(self):
        task = self.define("tr.expires", lambda ctx: None)
        created = task.enqueue({"n": 1}, expires="10s")
        self.clock.shift(timedelta(seconds=11))
        assert run_until_idle() == []
        expire = self.one("expire default")
        assert expire.context.trace_id == self.one("send default").context.trace_id
        [event] = expire.events
        assert (event.name, event.attributes["reason"]) == ("expired", "expired")
        assert Job.objects.get(pk=created.pk).state == "cancelled"


class StepTests(Traced):
    def test_steps_are_internal_spans_under_the_attempt_and_a_replay_is_an_event(self):
        calls = []

        def runner(ctx):
            ctx.step.run("fetch", lambda: "page")
            ctx.step.atomic("save", lambda: 1)
            calls.append(ctx.attempt)
            if len(calls) == 1:
                raise RuntimeError("after the steps")
            return "done"

        self.define("tr.steps", runner).enqueue({"n": 1})
        run_until_idle()
        first, second = sorted(self.spans("process default"), key=lambda s: s.start_time)
        fetch, save = self.one("step fetch"), self.one("step save")  # one each: not replayed
        for step in (fetch, save):
            assert step.kind == SpanKind.INTERNAL
            assert step.parent.span_id == first.context.span_id
        assert [(e.name, e.attributes["messaging.django_jobs.step"]) for e in second.events] == [
            ("step.replayed", "fetch"),
            ("step.replayed", "save"),
        ]

    def test_a_failing_step_span_has_error_status(self):
        def runner(ctx):
            ctx.step.run("charge", self.boom)

        self.define("tr.stepfail", runner, retry=Retry(attempts=1)).enqueue({"n": 1})
        run_until_idle()
        charge = self.one("step charge")
        assert charge.status.status_code == StatusCode.ERROR
        assert charge.attributes["error.type"] == "KeyError"

    @staticmethod
    def boom():
        raise KeyError("card")

    def test_spawned_children_join_the_parents_trace(self):
        child = self.define("tr.kid", lambda ctx: ctx.payload["n"], queue="kids")

        def parent(ctx):
            ids = ctx.step.spawn("children", child, [{"n": 1}, {"n": 2}])
            return ctx.step.gather("all", ids)

        self.define("tr.parent", parent).enqueue({"n": 0})
        for _ in range(3):
            run_until_idle()
        root = self.one("send default")
        spawn = self.one("send kids")
        parents = sorted(self.spans("process default"), key=lambda s: s.start_time)
        kids = self.spans("process kids")
        assert len(kids) == 2
        assert spawn.parent.span_id == parents[0].context.span_id
        assert spawn.attributes["messaging.batch.message_count"] == 2
        assert {s.context.trace_id for s in [spawn, *kids, parents[0]]} == {root.context.trace_id}
        assert {k.parent.span_id for k in kids} == {spawn.context.span_id}
        # The attempt whose gather found them ended links to each child's attempt.
        gathered = parents[-1]
        assert gathered.attributes["messaging.django_jobs.outcome"] == "succeeded"
        child_links = [
            link.context.span_id
            for link in gathered.links
            if link.attributes["messaging.django_jobs.link"] == "child"
        ]
        assert sorted(child_links) == sorted(k.context.span_id for k in kids)

    def test_async_runner_steps_nest_under_the_attempt(self):
        async def runner(ctx):
            return await ctx.step.arun("remote", lambda: 5)

        self.define("tr.async", runner).enqueue({"n": 1})
        run_until_idle()
        process, step = self.one("process default"), self.one("step remote")
        assert step.parent.span_id == process.context.span_id


class TasksBackendTests(Traced):
    def test_a_django_task_enqueued_in_a_request_is_sent_under_it_and_processed_after(self):
        with self.tracer.start_as_current_span("GET /sum") as request:
            result = add.enqueue(1, 2)
        run_until_idle()
        send, process = self.one("send default"), self.one("process default")
        assert send.parent.span_id == request.get_span_context().span_id
        assert send.attributes["messaging.message.id"] == result.id
        assert process.parent.span_id == send.context.span_id
        assert process.context.trace_id == request.get_span_context().trace_id


class WorkerThreadTests(TransactionTestCase):
    """The worker's own executor threads (and an async runner's loop thread): the attempt's
    span is current where the runner runs, and the worker puts the job on log records."""

    def setUp(self):
        needs_file_database()
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        tracing.configure(tracer_provider=provider)
        self.addCleanup(tracing.configure, None)
        self.records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = self.records.append  # type: ignore[method-assign]
        self.log = logging.getLogger("tests.tracing.worker")
        self.log.addHandler(handler)  # no filter: the records are made with the fields
        self.log.setLevel(logging.INFO)
        self.addCleanup(self.log.removeHandler, handler)
        log = self.log

        @job("tr.thread", idempotency_key="payload", retry=Retry(attempts=1))
        def threaded(ctx):
            return ctx.step.run("sync", lambda: log.info("sync step") or 1)

        @job("tr.loop", idempotency_key="payload", retry=Retry(attempts=1))
        async def looped(ctx):
            log.info("async runner")
            return await ctx.step.arun("async", lambda: 2)

        self.addCleanup(unregister, "tr.thread")
        self.addCleanup(unregister, "tr.loop")
        self.threaded, self.looped = threaded, looped

    def test_spans_nest_on_the_worker_threads_and_records_carry_the_job(self):
        sync_job = self.threaded.enqueue({"n": 1})
        async_job = self.looped.enqueue({"n": 1})
        Worker(concurrency=2, burst=True, scheduler=False).run()
        assert set(Job.objects.values_list("state", flat=True)) == {"succeeded"}
        spans = {s.name: s for s in self.exporter.get_finished_spans() if "step" in s.name}
        processes = [s for s in self.exporter.get_finished_spans() if s.name.startswith("proc")]
        by_job = {int(p.attributes["messaging.message.id"]): p for p in processes}
        assert spans["step sync"].parent.span_id == by_job[sync_job.pk].context.span_id
        assert spans["step async"].parent.span_id == by_job[async_job.pk].context.span_id
        fields = {
            r.getMessage(): (r.job_id, r.kind, r.attempt, r.queue, r.trace_id) for r in self.records
        }
        assert fields == {
            "sync step": (
                sync_job.pk, "tr.thread", 1, "default",
                f"{by_job[sync_job.pk].context.trace_id:032x}",
            ),
            "async runner": (
                async_job.pk, "tr.loop", 1, "default",
                f"{by_job[async_job.pk].context.trace_id:032x}",
            ),
        }  # fmt: skip


class LogTests(Traced):
    def test_records_written_while_a_job_runs_carry_its_fields_and_span(self):
        records: list[logging.LogRecord] = []

        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)

        handler = Keep()  # no filter: the records are made with the fields
        log = logging.getLogger("tests.tracing.runner")
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        self.addCleanup(log.removeHandler, handler)

        def runner(ctx):
            log.info("in the runner")
            ctx.step.run("inner", lambda: log.info("in a step"))

        created = self.define("tr.logs", runner, queue="mail").enqueue({"n": 1})
        log.info("outside any job")
        run_until_idle()
        outside, in_runner, in_step = records
        assert not hasattr(outside, "job_id") and not hasattr(outside, "trace_id")
        process, step = self.one("process mail"), self.one("step inner")
        for record, span in ((in_runner, process), (in_step, step)):
            assert (record.job_id, record.kind, record.attempt, record.queue) == (
                created.pk,
                "tr.logs",
                1,
                "mail",
            )
            assert record.trace_id == f"{span.context.trace_id:032x}"
            assert record.span_id == f"{span.context.span_id:016x}"

    def test_records_carry_the_job_fields_without_tracing(self):
        tracing.configure(None)
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append  # type: ignore[method-assign]
        handler.addFilter(JobLogFilter())  # kept for the settings that name it: no change
        log = logging.getLogger("tests.tracing.untraced")
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        self.addCleanup(log.removeHandler, handler)
        self.define("tr.logs2", lambda ctx: log.info("hello")).enqueue({"n": 1})
        run_until_idle()
        [record] = records
        assert (record.kind, record.attempt) == ("tr.logs2", 1)
        assert not hasattr(record, "trace_id")


def shape(sql: str) -> str:
    """A statement without its values (quoted text, numbers) and savepoint names (Django 5.2
    captures some statements without their text: None)."""
    return re.sub(r"'(?:[^']|'')*'|\b\d+\b|\"s\w+\"", "?", sql or "")


class CostTests(Traced):
    """With the API installed but no SDK configured, the statements are those of an install
    without OpenTelemetry at all; with a provider, the context rides in the same statements."""

    def statements(self):
        task = self.define("tr.cost", self.fails_once)
        self.failed = False
        with CaptureQueriesContext(connection) as enqueue:
            created = task.enqueue({"n": 1})
            task.enqueue_many([{"n": 2}, {"n": 3}])
        with CaptureQueriesContext(connection) as run:
            run_until_idle()
        Job.objects.filter(pk=created.pk).delete()
        Job.objects.filter(kind="tr.cost").delete()
        return [shape(q["sql"]) for q in enqueue.captured_queries], [shape(q["sql"]) for q in run]

    def fails_once(self, ctx):
        if not self.failed:
            self.failed = True
            raise ValueError("once")

    def test_no_sdk_configured_runs_the_statements_of_no_opentelemetry_at_all(self):
        tracing.configure(None)
        with_api = self.statements()
        real = tracing._api
        tracing._api = None  # as if opentelemetry were not installed
        try:
            without = self.statements()
        finally:
            tracing._api = real
        assert with_api == without
        assert not any("trace_context =" in sql for sql in with_api[1])

    def test_tracing_adds_no_statement(self):
        tracing.configure(None)
        untraced = self.statements()
        tracing.configure(self.provider)
        traced = self.statements()
        assert len(traced[0]) == len(untraced[0]) and len(traced[1]) == len(untraced[1])
        # The failed attempt's outcome writes the attempt's context in its own UPDATE.
        assert sum("trace_context =" in sql for sql in traced[1]) == 1


class MetricTests(Traced):
    def setUp(self):
        super().setUp()
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        self.reader = InMemoryMetricReader()
        tracing.configure(meter_provider=MeterProvider(metric_readers=[self.reader]))

    def points(self):
        found = {}
        for resource in self.reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = list(metric.data.data_points)
        return found

    def test_sent_messages_process_duration_and_queue_depth_without_job_ids(self):
        def maybe(ctx):
            if ctx.payload["n"] == 2:
                raise ValueError("two")

        task = self.define("tr.metrics", maybe, retry=Retry(attempts=1))
        task.enqueue({"n": 1})
        task.enqueue_many([{"n": 2}, {"n": 3}])
        task.enqueue_many([{"n": 4}, {"n": 5}], queue="later", delay="1h")
        assert self.spans() == []  # metrics alone: no tracer provider given
        run_until_idle()
        points = self.points()
        sent = {p.attributes["messaging.destination.name"]: p.value for p in points[
            "messaging.client.sent.messages"]}  # fmt: skip
        assert sent == {"default": 3, "later": 2}
        durations = {
            p.attributes.get("error.type"): p.count for p in points["messaging.process.duration"]
        }
        assert durations == {None: 2, "ValueError": 1}
        depth = {
            p.attributes["messaging.destination.name"]: p.value
            for p in points["messaging.django_jobs.queue.depth"]
        }
        assert depth == {"later": 2}
        for metric in points.values():
            for point in metric:
                assert "messaging.message.id" not in point.attributes
                assert point.attributes["messaging.system"] == "django_jobs"


def test_error_type_names_the_class_with_its_module():
    assert tracing.error_type(ValueError()) == "ValueError"
    assert tracing.error_type(transaction.TransactionManagementError()) == (
        "django.db.transaction.TransactionManagementError"
    )


def test_tracing_is_off_without_the_api(monkeypatch):
    monkeypatch.setattr(tracing, "_api", None)
    assert not tracing.enabled()
    assert tracing.sending([]).__enter__() is not None
    tracing.step_replayed("x")


def test_the_trace_id_of_the_current_span_is_not_the_jobs_without_a_job():
    record = logging.makeLogRecord({})
    with TracerProvider().get_tracer("t").start_as_current_span("s"):
        add_job_fields(record)
    assert not hasattr(record, "trace_id")
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ({"TRACE_RELATIONSHIP": "parent"}, ["django_jobs.E301"]),
        ({"TRACER_PROVIDER": "no.such.module.provider"}, ["django_jobs.E302"]),
        ({"TRACER_PROVIDER": object()}, ["django_jobs.E302"]),
        ({"TRACE_RELATIONSHIP": "link", "TRACER_PROVIDER": TracerProvider()}, []),
    ],
)
def test_tracing_settings_are_checked(jobs, expected):
    from django_jobs.checks import check_jobs_settings

    with override_settings(JOBS=jobs):
        errors = check_jobs_settings()
    assert [e.id for e in errors] == expected
    assert all(e.hint for e in errors)
