"""The running job's fields on every log record made in its thread (``engine.observe.records``),
for any handler: one added after jobs started running, pytest's ``caplog``, a queue handler's
copy. Jobs run by ``run_until_idle`` (the worker's own threads and output: the process tests
in ``tests/integration/test_worker_logging.py``)."""

from __future__ import annotations

import copy
import logging
import pickle

import pytest

from django_jobs import Retry, job
from django_jobs.engine.observe.records import install_log_fields
from django_jobs.kinds.registry import unregister
from django_jobs.testing import run_until_idle

pytestmark = pytest.mark.django_db

log = logging.getLogger("tests.log_fields")


@pytest.fixture
def kinds():
    defined: list[str] = []

    def define(kind, func, **options):
        defined.append(kind)
        return job(kind, idempotency_key="payload", retry=Retry(attempts=1), **options)(func)

    yield define
    for kind in defined:
        unregister(kind)


@pytest.fixture
def kept():
    """A handler added now, without any filter: the records it is given."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    yield records
    log.removeHandler(handler)
    log.setLevel(level)


def fields(record: logging.LogRecord) -> tuple:
    return tuple(getattr(record, name, None) for name in ("job_id", "kind", "attempt", "queue"))


def test_a_handler_added_after_jobs_ran_gets_the_fields_and_none_outside_a_job(kinds):
    first = kinds("lf.first", lambda ctx: log.info("first"))
    first.enqueue({"n": 1})
    run_until_idle()  # the factory is in place from here on
    records: list[logging.LogRecord] = []
    later = logging.Handler()
    later.emit = records.append  # type: ignore[method-assign]
    log.addHandler(later)
    log.setLevel(logging.INFO)
    try:
        second = kinds("lf.second", lambda ctx: log.warning("in %s", ctx.job.pk), queue="mail")
        created = second.enqueue({"n": 2})
        log.warning("outside")
        run_until_idle()
    finally:
        log.removeHandler(later)
        log.setLevel(logging.NOTSET)
    outside, inside = records
    assert fields(outside) == (None, None, None, None)
    assert fields(inside) == (created.pk, "lf.second", 1, "mail")
    # A format names them as any record attribute; a JSON formatter sees them in __dict__.
    text = logging.Formatter("%(job_id)s %(kind)s %(attempt)s %(queue)s %(message)s")
    assert text.format(inside) == f"{created.pk} lf.second 1 mail in {created.pk}"
    assert {"job_id", "kind", "attempt", "queue"} <= set(inside.__dict__)


def test_caplog_sees_the_fields(kinds, caplog):
    created = kinds("lf.caplog", lambda ctx: log.warning("hello")).enqueue({"n": 1})
    with caplog.at_level(logging.INFO, logger="tests.log_fields"):
        run_until_idle()
    [record] = [r for r in caplog.records if r.name == "tests.log_fields"]
    assert fields(record) == (created.pk, "lf.caplog", 1, "default")


def test_a_calls_own_extra_wins_and_the_record_survives_a_copy_and_a_pickle(kinds, kept):
    def runner(ctx):
        log.info("mine", extra={"queue": "sms", "job_id": "theirs"})
        log.info("plain")

    created = kinds("lf.extra", runner).enqueue({"n": 1})
    run_until_idle()
    mine, plain = kept
    assert fields(mine) == ("theirs", "lf.extra", 1, "sms")  # no "Attempt to overwrite"
    assert fields(plain) == (created.pk, "lf.extra", 1, "default")
    for again in (copy.copy(plain), pickle.loads(pickle.dumps(plain))):  # QueueHandler, sockets
        assert fields(again) == fields(plain)
    # A key the record itself has is still refused, as ever.
    with pytest.raises(KeyError, match="Attempt to overwrite"):
        log.makeRecord("x", logging.INFO, "f", 1, "m", (), None, extra={"levelname": "x"})


def test_the_factory_chains_to_the_one_before_and_is_installed_once(kinds, kept):
    before = logging.getLogRecordFactory()

    def tagging(*args, **kwargs):
        record = before(*args, **kwargs)
        record.tagged = True
        return record

    logging.setLogRecordFactory(tagging)
    try:
        install_log_fields()
        installed = logging.getLogRecordFactory()
        install_log_fields()
        assert logging.getLogRecordFactory() is installed is not tagging
        created = kinds("lf.chain", lambda ctx: log.info("chained")).enqueue({"n": 1})
        run_until_idle()
    finally:
        logging.setLogRecordFactory(before)
    [record] = kept
    assert record.tagged and fields(record) == (created.pk, "lf.chain", 1, "default")
