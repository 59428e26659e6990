from __future__ import annotations

import pytest

from django_jobs import IdempotencyRequired, JobDuplicate, UnknownKind, job
from django_jobs.kinds.registry import all_handles, lookup, unregister


def test_idempotency_key_is_required_at_decoration():
    with pytest.raises(IdempotencyRequired) as info:
        job("unit.nokey")
    assert info.value.code == "IDEMPOTENCY_REQUIRED"
    assert '"payload"' in str(info.value)


def test_two_functions_under_one_kind_is_a_duplicate():
    @job("unit.dup", idempotency_key="payload")
    def first(ctx):
        return 1

    try:
        with pytest.raises(JobDuplicate) as info:

            @job("unit.dup", idempotency_key="payload")
            def second(ctx):
                return 2

        assert info.value.code == "JOB_DUPLICATE"
        assert lookup("unit.dup").func is first.func
    finally:
        unregister("unit.dup")


def test_one_kind_on_two_engines_is_a_duplicate():
    def runner(ctx):
        return None

    job("unit.engines", idempotency_key="payload")(runner)
    try:
        with pytest.raises(JobDuplicate, match="engine"):
            job("unit.engines", idempotency_key="payload", engine="fleet")(runner)
    finally:
        unregister("unit.engines")


def test_reimporting_the_same_function_is_not_a_duplicate():
    # A module imported twice (autoreload, a test importing it by another path) defines the
    # same function again: a new object with the same module and qualified name. (Its body
    # may have changed in between, as after an edit that autoreload picks up.)
    first_import: dict = {"__name__": "unit_reimported"}
    second_import: dict = {"__name__": "unit_reimported"}
    exec("def runner(ctx):\n    return 'before'\n", first_import)
    exec("def runner(ctx):\n    return 'after'\n", second_import)
    assert first_import["runner"] is not second_import["runner"]

    first = job("unit.same", idempotency_key="payload")(first_import["runner"])
    try:
        assert lookup("unit.same") is first
        again = job("unit.same", idempotency_key="payload")(second_import["runner"])
        # The newer definition replaces the older one: it is what workers run from now on.
        assert lookup("unit.same") is again and again is not first
        assert lookup("unit.same").func(None) == "after"
        assert [h for h in all_handles() if h.kind == "unit.same"] == [again]
    finally:
        unregister("unit.same")


def test_decorating_the_same_function_twice_is_not_a_duplicate():
    def runner(ctx):
        return "run"

    first = job("unit.twice", idempotency_key="payload")(runner)
    try:
        again = job("unit.twice", idempotency_key="payload", label="Twice")(runner)
        assert lookup("unit.twice") is again and again.func is first.func is runner
        assert again.label == "Twice"  # the last decoration's options hold
        assert [h for h in all_handles() if h.kind == "unit.twice"] == [again]
    finally:
        unregister("unit.twice")


def test_unknown_kind_says_where_to_define_it():
    with pytest.raises(UnknownKind) as info:
        lookup("nope.missing")
    assert info.value.code == "UNKNOWN_KIND"
    assert "jobs.py" in str(info.value)


def test_describe_is_a_json_manifest():
    from testproject.jobs import validated

    row = validated.describe()
    assert row["kind"] == "test.validated"
    assert row["member_safe"] is True
    assert row["retry"]["schedule_ms"] == [1000, 2000]
    assert row["input"]["properties"]["order"] == {"type": "integer", "minimum": 1}
    assert row["input"]["required"] == ["order"]
    assert row["concurrency"] == 4


def test_describe_shows_the_rate():
    from testproject.jobs import validated

    @job("unit.rated", idempotency_key="payload", rate="5/10s")
    def rated(ctx):
        return None

    try:
        assert rated.describe()["rate"] == "5/10s"
        assert validated.describe()["rate"] is None
    finally:
        unregister("unit.rated")


@pytest.mark.parametrize(
    "decorator",
    [
        '@job("unit.where")\n',
        '@job(\n    "unit.where",\n    label="Where",\n)\n',
        '@job("unit.where", idempotency_key=42)\n',
    ],
)
def test_a_missing_idempotency_key_names_the_file_and_line_of_the_job(
    tmp_path, monkeypatch, decorator
):
    """At import time the traceback's last frames are Django's app loading (or its
    autoreloader): the message itself says where the decorated function is."""
    import importlib.util

    source = f"from django_jobs import job\n\n\n{decorator}def where(ctx):\n    return 1\n"
    path = tmp_path / "shop" / "jobs.py"
    path.parent.mkdir()
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("unit_where_jobs", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(IdempotencyRequired) as info:
        spec.loader.exec_module(module)
    assert str(info.value).startswith("shop/jobs.py:4: @job('unit.where'")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # a path outside the working directory stays whole
    with pytest.raises(IdempotencyRequired, match=rf"^{path}:4: "):
        spec.loader.exec_module(module)


def test_time_limit_is_the_hard_limit_and_defaults_to_timeout_plus_the_kill_grace(settings):
    from datetime import timedelta

    def runner(ctx):
        return None

    hard = job("unit.hard", idempotency_key="payload", timeout="30s", time_limit="45s")(runner)
    soft = job("unit.soft_only", idempotency_key="payload", timeout="30s")(runner)
    neither = job("unit.no_limits", idempotency_key="payload")(runner)
    try:
        assert hard.hard_limit == timedelta(seconds=45)
        assert hard.describe()["time_limit"] == 45.0
        assert soft.hard_limit == timedelta(seconds=40)  # 30 s plus the default 10 s grace
        assert neither.hard_limit is None and neither.describe()["time_limit"] is None
        settings.JOBS = {**settings.JOBS, "KILL_GRACE": "2m"}
        assert soft.describe()["time_limit"] == 150.0
    finally:
        for kind in ("unit.hard", "unit.soft_only", "unit.no_limits"):
            unregister(kind)


@pytest.mark.parametrize("time_limit", ["10s", "0s"])
def test_a_hard_limit_before_the_soft_one_or_at_zero_is_refused_with_the_users_line(time_limit):
    with pytest.raises(ValueError, match="time_limit") as info:

        @job("unit.bad_limit", idempotency_key="payload", timeout="30s", time_limit=time_limit)
        def runner(ctx):
            return None

    assert "test_registry.py" in str(info.value)
    assert "not below timeout=" in str(info.value)
    assert "unit.bad_limit" not in {h.kind for h in all_handles()}
