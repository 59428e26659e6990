"""Text from jobs made safe for a terminal or a log: control characters escaped, visible.

A job's key, payload, log lines, errors and reasons come from runners and from members; printed
raw, an escape sequence in them could rewrite the screen (a fake "state succeeded" line) or
forge a log line. ``printable`` writes each such character as an escape (``\\x1b``, ``\\n``,
``\\u202e``), so the text stays readable and nothing in it acts on the terminal.
``printable_json`` does the same for a JSON document: JSON escapes C0 controls itself, but not
DEL, the C1 controls or the rest below.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls; the line and paragraph separators; the bidirectional
# formatting characters (they reorder what follows them); lone surrogates (they cannot be
# encoded, so printing one fails).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_UNSAFE_KEEPING_NEWLINES = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object, *, keep_newlines: bool = False) -> str:
    """``str(value)`` with every control character escaped; ``keep_newlines`` keeps ``\\n``.

    Keep newlines only for text the caller lays out line by line itself (a traceback in a log
    record); a single field (a key, a kind, a reason) never keeps them.
    """
    text = value if isinstance(value, str) else str(value)
    pattern = _UNSAFE_KEEPING_NEWLINES if keep_newlines else _UNSAFE
    return pattern.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable_json(document: str) -> str:
    """A JSON text (from ``json.dumps(..., ensure_ascii=False)``) with no control character.

    JSON escapes C0 controls inside strings itself, so a raw newline is the layout's; the other
    characters can only occur inside strings, where ``\\uXXXX`` means the same character: the
    document parses to the same data.
    """
    return _UNSAFE_KEEPING_NEWLINES.sub(_json_escape, document)
