from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_jobs import InvalidDuration, Retry
from django_jobs.durations import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("3d", 259200),
        ("2h", 7200),
        ("250ms", 0.25),
        ("1w", 604800),
        (12, 12),
        (1.5, 1.5),
        (timedelta(minutes=2), 120),
    ],
)
def test_durations_parse(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("bad", ["", "5", "5 minutes", "-3s", "3x", "1h30m", None, True, [], -1])
def test_bad_durations_raise_a_clear_error(bad):
    with pytest.raises(InvalidDuration) as info:
        parse_duration(bad, name="delay")
    assert info.value.code == "INVALID_DURATION"
    assert "delay=" in str(info.value) and '"30s"' in str(info.value)


def test_retry_schedule_matches_the_spec():
    assert Retry(attempts=5, backoff="exponential", delay="1s").schedule() == [
        1000,
        2000,
        4000,
        8000,
    ]
    assert Retry(attempts=4, backoff="linear", delay="2s").schedule() == [2000, 4000, 6000]
    assert Retry(attempts=3, backoff="fixed", delay="5s").schedule() == [5000, 5000]
    assert Retry(attempts=6, delay="1m", max_delay="3m").schedule() == [
        60000,
        120000,
        180000,
        180000,
        180000,
    ]
    assert Retry(attempts=1).schedule() == []


@pytest.mark.parametrize("kwargs", [{"attempts": 0}, {"backoff": "random"}, {"delay": "soon"}])
def test_bad_retry_options_are_refused(kwargs):
    with pytest.raises(ValueError):
        Retry(**kwargs)


@given(
    attempts=st.integers(min_value=2, max_value=12),
    delay_ms=st.integers(min_value=2, max_value=60_000),
    backoff=st.sampled_from(["exponential", "linear", "fixed"]),
    failed=st.integers(min_value=1, max_value=11),
)
def test_equal_jitter_stays_in_the_upper_half(attempts, delay_ms, backoff, failed):
    policy = Retry(attempts=attempts, backoff=backoff, delay=delay_ms / 1000, jitter=True)
    base = policy.base_delay_ms(failed)
    for _ in range(20):
        assert base / 2 - 1 <= policy.delay_ms(failed) <= base


def test_decide_gives_up_after_the_last_attempt():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    policy = Retry(attempts=3, delay="10s", jitter=False)
    assert policy.decide(1, now).run_at == now + timedelta(seconds=10)
    assert policy.decide(2, now).run_at == now + timedelta(seconds=20)
    assert policy.decide(3, now).retry is False


def test_decide_counts_within_the_jobs_own_limit():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    policy = Retry(attempts=3, delay="10s", jitter=False)
    # An operator's retry after 3 spent attempts grants 3 more (limit 6): the 4th attempt's
    # failure waits the first delay again, the 5th the second, the 6th gives up.
    assert policy.decide(4, now, limit=6).run_at == now + timedelta(seconds=10)
    assert policy.decide(5, now, limit=6).run_at == now + timedelta(seconds=20)
    assert policy.decide(6, now, limit=6).retry is False
    # Admitted under an older policy of one attempt: that limit holds.
    assert policy.decide(1, now, limit=1).retry is False
