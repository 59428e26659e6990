"""The depth check of stored JSON reads the text: it agrees with walking the value."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from django_jobs.validation import MAX_DEPTH, _nested_deeper


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def nest(value, shape: list[bool]):
    for as_list in shape:
        value = [value, "]}[{"] if as_list else {'k"[{': value, "e": {}}
    return value


tricky_text = st.text(alphabet='[]{}"\\ab', max_size=6)
leaves = st.none() | st.integers() | tricky_text
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=10,
)


@given(values, st.lists(st.booleans(), max_size=MAX_DEPTH + 8), st.booleans())
def test_the_text_check_agrees_with_the_depth_of_the_value(value, shape, ascii_only):
    nested = nest(value, shape)
    text = json.dumps(nested, ensure_ascii=ascii_only)
    for limit in (2, MAX_DEPTH):
        assert _nested_deeper(text, limit) == (depth(nested) > limit)


def test_a_wide_shallow_value_is_not_deep():
    wide = {"group": [{"kind": "k", "payload": {"n": n}} for n in range(1000)]}
    assert not _nested_deeper(json.dumps(wide), MAX_DEPTH)
