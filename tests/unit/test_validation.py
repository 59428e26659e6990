"""``django_jobs.validation``: what stored JSON text may hold, and how old rows are read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.exceptions import InvalidPayload
from django_jobs.validation import (
    MAX_DEPTH,
    ReadableJSONDecoder,
    check_key,
    readable,
    storable_json,
    storable_text,
)

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=8)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | ANY_TEXT,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(ANY_TEXT, children, max_size=3)
    ),
    max_leaves=10,
)


def strings_of(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_of(item)


def depth_of(value) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


def storable(text: str) -> bool:
    return "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@given(JSON_VALUES)
def test_accepted_exactly_when_every_string_is_storable(value):
    expected = all(storable(s) for s in strings_of(value))
    try:
        text = storable_json(value, what="payload")
    except InvalidPayload as exc:
        assert not expected, exc.message
    else:
        assert expected
        assert json.loads(text) == value
        text.encode()  # valid UTF-8


@given(JSON_VALUES)
def test_readable_is_always_storable(value):
    repaired = readable(value)
    assert json.loads(storable_json(repaired, what="payload")) == repaired
    if all(storable(s) for s in strings_of(value)):
        assert repaired == value


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH])
def test_up_to_the_depth_limit_is_accepted(depth):
    assert depth_of(nested(depth)) == depth
    assert storable_json(nested(depth), what="payload") == "[" * depth + "1" + "]" * depth
    text = storable_json({"a": nested(depth - 1)}, what="payload")
    assert text == '{"a":' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


@pytest.mark.parametrize("value", [nested(MAX_DEPTH + 1), {"a": nested(MAX_DEPTH)}, nested(5000)])
def test_deeper_is_refused(value):
    with pytest.raises(InvalidPayload, match="more than 64 levels"):
        storable_json(value, what="payload")


def test_many_brackets_in_strings_are_not_depth():
    value = ["[" * 500, {"k": "{" * 500}]
    assert depth_of(value) == 2
    assert json.loads(storable_json(value, what="payload")) == value


def test_an_escaped_backslash_before_u0000_is_not_nul():
    assert storable_json("\\u0000", what="payload") == '"\\\\u0000"'


@pytest.mark.parametrize("key", ["a\x00", "a\x01", "tab\t", "\x7f", "\x85", "\ud800"])
def test_keys_refuse_control_characters(key):
    with pytest.raises(InvalidPayload, match="U\\+"):
        check_key(key)


def test_keys_accept_printable_unicode():
    assert check_key("render:vidéo-😀") == "render:vidéo-😀"


def test_printable_escapes_what_cannot_be_stored():
    assert storable_text("a\x00b\ud800c") == "a\\u0000b\\ud800c"


def test_the_decoder_repairs_old_rows():
    decode = ReadableJSONDecoder().decode
    assert decode('{"a": "x\\ud800", "\\u0000": 1}') == {"a": "x\\ud800", "\\u0000": 1}
    assert decode('{"a": "é \\u00e9"}') == {"a": "é é"}
    deep = "[" * 100 + "]" * 100
    assert decode(deep) == deep
    assert decode('["[[[", 1]') == ["[[[", 1]


# --- the payload size limit: one check for admission, schedules and the API ----------------


STORABLE_TEXT = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")


@given(
    value=st.text(STORABLE_TEXT, max_size=80) | st.lists(st.text(STORABLE_TEXT, max_size=10)),
    limit=st.integers(min_value=1, max_value=400),
)
def test_a_payload_is_refused_exactly_when_its_stored_json_is_over_the_limit(value, limit):
    from django.test import override_settings

    from django_jobs.exceptions import PayloadTooLarge
    from django_jobs.validation import storable_payload

    stored = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    with override_settings(JOBS={"MAX_PAYLOAD_BYTES": limit}):
        if len(stored) <= limit:
            assert storable_payload(value).encode() == stored
            return
        with pytest.raises(PayloadTooLarge) as refused:
            storable_payload(value, what="payload of 'x'")
    assert (refused.value.size, refused.value.limit) == (len(stored), limit)
    assert refused.value.message == (
        f"The payload of 'x' is {len(stored)} bytes as JSON; the limit is {limit} "
        '(JOBS["MAX_PAYLOAD_BYTES"]). Store large data elsewhere and pass a reference.'
    )


def test_no_limit_when_the_setting_is_none_or_zero():
    from django.test import override_settings

    from django_jobs.validation import payload_limit, storable_payload

    for setting in (None, 0):
        with override_settings(JOBS={"MAX_PAYLOAD_BYTES": setting}):
            assert payload_limit() is None
            assert storable_payload("x" * 300_000) == '"' + "x" * 300_000 + '"'
