"""What text the job tables may hold: the one check every write door shares.

Stored JSON (payloads, results, captured state, schedule payloads, step values, event data)
must be text both databases hold and every reader can print:

* JSON values only (``allow_nan=False``), nested at most ``MAX_DEPTH`` levels;
* no NUL character (PostgreSQL's ``jsonb`` and ``text`` refuse it);
* no lone surrogate (``"\\ud800"``): it is not Unicode text, UTF-8 cannot encode it, so a row
  holding one breaks every page that renders it.

``storable_payload`` adds the size limit (``JOBS["MAX_PAYLOAD_BYTES"]``) for payloads: the one
size check of admission, of schedules, and of the API (which answers 413 for it).

``storable_json`` applies it at admission and write time (API, ``enqueue``/``enqueue_many``/
``as_user``, CLI, admin, schedules, ``emit``, the Tasks backend, runner results and step
values). ``check_key`` does the same for idempotency keys, which also refuse control
characters. ``storable_text`` escapes a log line instead of refusing it (a runner's log never fails
its job). ``readable`` repairs a value read from a row written before these checks existed, so
such a row degrades (its bad characters shown as escapes) instead of breaking a read.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .conf import jobs_settings
from .exceptions import InvalidPayload, PayloadTooLarge

#: The deepest nesting stored JSON may have: ``[[1]]`` is 2 levels.
MAX_DEPTH = 64

#: Lone surrogates and NUL: the characters no stored text may hold.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: What an idempotency key may not hold: C0 and C1 control characters, DEL, surrogates.
_KEY_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")

_JSON_HELP = (
    "Use dicts, lists, strings, numbers, booleans and None; convert dates to ISO strings and "
    "decimals to strings."
)


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def storable_json(value: Any, *, what: str) -> str:
    """Return ``value`` as compact JSON text, or raise ``InvalidPayload`` saying what is wrong.

    The text keeps non-ASCII characters as they are (UTF-8 when stored). The checks cost a few
    substring scans of that text; the value is walked only when a scan finds something.
    """
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        raise InvalidPayload(_too_deep(what)) from None
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"The {what} is not JSON ({exc}). {_JSON_HELP}") from exc
    # Surrogates survive ensure_ascii=False as themselves: the text is not valid UTF-8.
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise InvalidPayload(_bad_text(what, "a lone surrogate (such as \\ud800)")) from None
    # json.dumps writes NUL as \u0000; seen in the text, it may also be an escaped backslash
    # before "u0000": look at the strings themselves to be sure.
    if "\\u0000" in text and _holds_nul(value):
        raise InvalidPayload(_bad_text(what, "a NUL character (\\u0000)"))
    # Each level opens a bracket: with few brackets the value cannot be too deep.
    if text.count("[") + text.count("{") > MAX_DEPTH and _nested_deeper(text, MAX_DEPTH):
        raise InvalidPayload(_too_deep(what))
    return text


def parse_json(text: str, *, what: str) -> Any:
    """JSON text typed by a person (a form field, an option), parsed and checked as
    ``storable_json`` checks a value: ``InvalidPayload`` when it is nested deeper than
    ``MAX_DEPTH`` (``json.loads`` alone would recurse to the interpreter's limit on it), holds
    text no database stores, or is not JSON (``ValueError`` says where)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidPayload(_too_deep(what)) from None
    check_json(value, what=what)
    return value


def payload_limit() -> int | None:
    """The most bytes a payload's stored JSON may take (``JOBS["MAX_PAYLOAD_BYTES"]``);
    ``None`` when payloads are not limited (the setting is ``None`` or 0)."""
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    return int(limit) if limit else None


def check_payload_size(text: str, *, what: str = "payload") -> None:
    """Raise ``PayloadTooLarge`` when ``text`` (a payload's JSON, as ``storable_json`` writes
    it) is over ``payload_limit()`` bytes as stored (UTF-8)."""
    limit = payload_limit()
    if limit is None or len(text) * 4 <= limit:  # UTF-8 takes at most 4 bytes a character
        return
    size = len(text) if text.isascii() else len(text.encode())
    if size > limit:
        raise PayloadTooLarge(
            f"The {what} is {size} bytes as JSON; the limit is {limit} "
            '(JOBS["MAX_PAYLOAD_BYTES"]). Store large data elsewhere and pass a reference.',
            size=size,
            limit=limit,
        )


def storable_payload(value: Any, *, what: str = "payload") -> str:
    """``storable_json`` for a payload: its JSON text, also refused (``PayloadTooLarge``) when
    over ``JOBS["MAX_PAYLOAD_BYTES"]``."""
    text = storable_json(value, what=what)
    check_payload_size(text, what=what)
    return text


def check_json(value: Any, *, what: str) -> None:
    """``storable_json`` for a caller that does not need the text."""
    storable_json(value, what=what)


def check_key(key: Any, *, what: str = "idempotency key") -> str:
    """An idempotency key: a non-empty string without control characters or surrogates."""
    if not isinstance(key, str) or not key:
        raise InvalidPayload(f"The {what} must be a non-empty string; got {key!r}.")
    return check_label(key, what=what)


def check_label(text: str, *, what: str) -> str:
    """A short stored string (a key, a name, a tenant): no control character, no surrogate."""
    found = _KEY_FORBIDDEN.search(text)
    if found is not None:
        raise InvalidPayload(
            f"The {what} holds the character U+{ord(found.group()):04X} at position "
            f"{found.start()}: control characters and lone surrogates are refused. Use "
            "printable text, such as letters, digits, ':' and '-'."
        )
    return text


def key_problem(key: str) -> str | None:
    """What is wrong with ``key`` as an idempotency key, in words; ``None`` if nothing."""
    try:
        check_key(key)
    except InvalidPayload as exc:
        return exc.message
    return None


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates written as visible escapes (``\\ud800``)."""
    return _UNSTORABLE.sub(_escape, text)


def readable(value: Any) -> Any:
    """A copy of a stored JSON value with NUL and lone surrogates escaped (``storable_text``) in
    every string, keys included."""
    if isinstance(value, str):
        return storable_text(value) if _UNSTORABLE.search(value) else value
    if isinstance(value, list):
        return [readable(item) for item in value]
    if isinstance(value, dict):
        return {readable(k) if isinstance(k, str) else k: readable(v) for k, v in value.items()}
    return value


class ReadableJSONDecoder(json.JSONDecoder):
    """Decodes stored JSON, repairing what rows written before these checks may hold.

    NUL and lone surrogates come back escaped (``readable``); a value nested deeper than
    ``MAX_DEPTH`` comes back as its JSON text, a string, so no reader recurses into it. Text
    without a ``\\u`` escape and with few brackets is decoded as by ``json.JSONDecoder``.
    """

    def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
        value = super().decode(s, *args, **kwargs)
        if s.count("[") + s.count("{") > MAX_DEPTH and _nested_deeper(s, MAX_DEPTH):
            return storable_text(s)
        if "\\u" in s:
            return readable(value)
        return value


def _bad_text(what: str, found: str) -> str:
    return (
        f"The {what} holds {found} in a string or a key. Stored text must be valid Unicode "
        "without NUL: remove the character, or encode binary data (for example as base64)."
    )


def _too_deep(what: str) -> str:
    return (
        f"The {what} is nested more than {MAX_DEPTH} levels deep. Flatten it, or store the "
        "structure elsewhere and pass a reference."
    )


def _holds_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(k for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def _nested_deeper(text: str, limit: int) -> bool:
    """Is the JSON ``text`` nested more than ``limit`` containers deep?

    Read from the text: its strings and everything but brackets removed, each pass drops the
    innermost pairs (one level); a value wide and shallow (a canvas of 1,000 members) is done
    in a few passes over its brackets, where walking it visits every container."""
    left = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    for _ in range(limit):
        if not left:
            return False
        left = _INNERMOST.sub("", left)
    return bool(left)
