"""A worker refuses to start on a connection pool smaller than its threads hold.

With Django's PostgreSQL pool (``OPTIONS["pool"]``) each thread of a worker keeps a connection
while it runs; a pool smaller than that makes the threads past it wait 30 s and fail their
jobs. ``runjobs`` says so at start, with the size to set.
"""

from __future__ import annotations

from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.conf import jobs_settings
from django_jobs.management.readiness import WORKER_CONNECTIONS_BESIDE_THREADS, pool_too_small


def with_options(options: dict) -> mock._patch:
    return mock.patch.dict(connections.settings[jobs_settings.DATABASE], {"OPTIONS": options})


@given(
    concurrency=st.integers(1, 64),
    pool=st.one_of(
        st.just(True),
        st.fixed_dictionaries({"max_size": st.integers(1, 80)}),
        st.fixed_dictionaries({"min_size": st.integers(1, 80)}),
        st.fixed_dictionaries({"min_size": st.integers(1, 10), "max_size": st.integers(10, 80)}),
    ),
)
def test_a_pool_is_too_small_exactly_when_it_holds_fewer_than_the_worker_needs(concurrency, pool):
    alias = jobs_settings.DATABASE
    size = 4 if pool is True else pool.get("max_size") or pool["min_size"]
    with with_options({"pool": pool}):
        said = pool_too_small(alias, concurrency)
    needed = concurrency + WORKER_CONNECTIONS_BESIDE_THREADS
    if size >= needed:
        assert said is None
    else:
        assert said is not None
        assert f"holds at most {size} connection(s)" in said
        assert f'"max_size": {needed}' in said and "lower --concurrency" in said


def test_no_pool_and_an_empty_pool_option_need_nothing():
    alias = jobs_settings.DATABASE
    for options in ({}, {"pool": False}, {"pool": None}):
        with with_options(options):
            assert pool_too_small(alias, 50) is None


@pytest.mark.django_db
def test_runjobs_refuses_to_start_on_a_pool_too_small_and_says_what_to_set():
    # psycopg's default pool (4 connections) serves no worker: --concurrency 2 holds 6.
    with with_options({"pool": True}), pytest.raises(CommandError) as refused:
        call_command("runjobs", "--processes", "0", "--concurrency", "2", "--burst")
    assert '"max_size": 6' in str(refused.value)
