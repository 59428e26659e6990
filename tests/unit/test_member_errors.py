"""A member never sees a server traceback: the stored error keeps the line that starts the
traceback, whatever the message holds, so the member's view (``public_error``) ends before it."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from django_jobs.engine.run.executor import ERROR_CAP, cap_error
from django_jobs.serialize import TRACEBACK_MARKER, public_error

#: Characters that storing escapes (NUL, lone surrogates: six characters each) or that a
#: terminal reads (control characters), and plain ones.
AWKWARD = ["\x00", "\ud800", "\udfff", "\udc80", "\x01", "\x1b", "\x7f", "\n", "\r", "\t", "\\"]
SECRET = "SRVFRAME"


def frames(count: int) -> str:
    return "".join(
        f'  File "/srv/app/{SECRET}/module_{i}.py", line {i}, in handler_{i}\n'
        f"    {SECRET}_call_{i}(argument)\n"
        for i in range(count)
    )


#: Runs of one character (long prefixes cheaply) mixed with arbitrary text.
runs = st.lists(
    st.tuples(st.sampled_from([*AWKWARD, "x", "é"]), st.integers(1, 1500)), max_size=6
).map(lambda parts: "".join(char * n for char, n in parts))
prefixes = st.lists(st.one_of(runs, st.text(max_size=50)), max_size=4).map("".join)


@given(prefix=prefixes, count=st.integers(0, 80), last_error=st.booleans())
def test_the_members_view_holds_no_line_of_the_traceback(prefix, count, last_error):
    assume(SECRET not in prefix and TRACEBACK_MARKER not in prefix)
    message = f"ValueError: {prefix}"
    if last_error:  # as a dead letter's error wraps the last attempt's
        message = f"MAX_ATTEMPTS: Retries are spent.\nLast error: {message}"
    tb = frames(count)
    stored = cap_error(f"{message}{TRACEBACK_MARKER}\n{tb}")
    assert len(stored) <= ERROR_CAP
    assert TRACEBACK_MARKER in stored  # the operator sees where the traceback starts
    shown = public_error(stored)
    assert SECRET not in shown
    assert not any(line.strip() in shown for line in tb.splitlines() if line.strip())
    assert "Traceback" not in shown


def test_a_message_of_nul_characters_does_not_push_the_traceback_into_the_cut():
    # 200 NULs are 1,200 characters once escaped: the start of the traceback used to fall in
    # the part cut out of the middle, and the end of the frames reached the owner.
    nuls = "\x00" * 200
    stored = cap_error(f"ValueError: {nuls}boom{TRACEBACK_MARKER}\n{frames(40)}")
    shown = public_error(stored)
    assert shown.startswith("ValueError: \\u0000") and SECRET not in shown
    assert stored.endswith(frames(40)[-200:])  # the operator keeps the end of the traceback


def test_an_error_without_traceback_is_cut_in_the_middle_as_before():
    text = "E" * 1500 + "\x00" * 300
    stored = cap_error(text)
    assert len(stored) == ERROR_CAP
    assert stored.startswith("E" * 1000 + "\n[…]\n") and stored.endswith("\\u0000" * 10)
