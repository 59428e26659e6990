"""Search: jobs by a payload field, their error text, when they were created and their worker.

One parser and one filter for the three surfaces (SPEC §18), each in its own spelling:

- the API: ``GET jobs/?payload.user=42&error=timeout&created_after=1h&worker=w1``
  (``search_from_query``);
- the admin's search box: ``payload.user=42 error:timeout since:1h worker:w1``, beside plain
  words that search ids, kinds, owners and keys as before (``search_from_words``);
- ``jobs list --payload user=42 --error timeout --since 1h --worker w1`` (``search_from_options``).

Each gives a ``JobSearch``, and ``JobSearch.apply(jobs, operator=...)`` narrows a queryset the
caller has already scoped to what its user may see (a member's own jobs): the scoping comes
first, so no filter reaches another member's jobs. A malformed filter raises ``InvalidFilter``,
whose ``errors`` map each bad parameter, named as its surface spells it, to what to send instead.

What each filter means (docs/api.md, "Searching jobs"):

``payload.<path>=<value>``
    The payload's value at ``path``: keys separated by dots (``payload.user.id``), at most
    ``MAX_DEPTH`` of them; a key is letters, digits, ``_`` and ``-`` and starts with a letter or
    ``_``; a key of digits only is an index into a list (``payload.files.0``). A value that
    reads as a JSON number, ``true``, ``false`` or ``null`` matches that JSON value or the same
    text as a string (``payload.user=42`` matches ``42`` and ``"42"``); a value in double quotes
    that reads as a JSON string matches that string only (``payload.user="42"``); any other
    value matches as a string (``payload.name=ada``). ``null`` matches a JSON null, never a
    missing key. Several payload filters must all match.
``error=<text>``
    The job's error contains the text, ignoring case (on SQLite, the case of ASCII letters
    only). Operators search the whole error, its traceback included; a member searches what
    they are shown of it (the error without its traceback).
``created_after=<when>``, ``created_before=<when>``
    Created at or after, and before, that instant: ISO 8601 (``2026-12-07T08:00:00+01:00``,
    ``...Z``; without an offset, in the current time zone; a date alone is its midnight), or a
    duration back from now (``30m``, ``1h``, ``7d``: the units of ``durations.parse_duration``).
``worker=<name>``
    Jobs whose last attempt was claimed by the worker of that name (``runjobs --name``, the
    ``worker`` of the job JSON, the name ``GET workers/`` lists). Operators only: which worker
    runs a job is operators' business.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db.models import Case, F, Q, QuerySet, TextField, Value, When
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import StrIndex, Substr
from django.db.models.lookups import GreaterThan
from django.utils import timezone

from . import clock
from .durations import parse_duration
from .exceptions import InvalidDuration, JobsError
from .models import Job
from .serialize import TRACEBACK_MARKER

#: The API's query parameters (and the admin's words) of a payload filter start with this.
PAYLOAD_PREFIX = "payload."
#: At most this many keys in a payload path.
MAX_DEPTH = 8
#: At most this many characters in a filter's value (a payload value, an error's text).
MAX_TEXT = 500
#: A worker's name is at most this long (``Worker.name``).
MAX_WORKER = 200
#: The search parameters besides ``payload.<path>``, as the API spells them.
PARAMETERS = ("error", "created_after", "created_before", "worker")
#: The admin's search words: ``word:value`` -> the parameter it sets.
WORDS = {
    "error": "error",
    "worker": "worker",
    "since": "created_after",
    "until": "created_before",
    "created_after": "created_after",
    "created_before": "created_before",
}

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}\Z")
_INDEX = re.compile(r"[0-9]{1,6}\Z")
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_WHEN_HINT = (
    "an ISO 8601 date and time such as 2026-12-07T08:00:00+00:00 (without an offset it is read "
    "in the current time zone), or a duration back from now such as 30m, 1h or 7d"
)


class InvalidFilter(JobsError, ValueError):
    """A search filter is malformed: ``errors`` names each bad parameter and says what to send."""

    code = "INVALID_FILTER"

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__(" ".join(f"{name}: {text}" for name, text in self.errors.items()))


class OperatorOnlyFilter(InvalidFilter):
    """A member used a filter that only operators may use (``worker``)."""

    code = "OPERATOR_ONLY_FILTER"


@dataclass(frozen=True, kw_only=True)
class PayloadFilter:
    """One ``payload.<path>=<value>``: the path's keys and the JSON values it may equal."""

    path: tuple[str, ...]
    """The keys (and list indexes, as digits) from the payload down."""
    values: tuple[Any, ...]
    """The JSON values that match: one, or a number (``true``, ``null``) and its text."""


@dataclass(frozen=True, kw_only=True)
class JobSearch:
    """The search filters of one request, parsed; ``apply`` narrows a queryset of jobs."""

    payload: tuple[PayloadFilter, ...] = ()
    error: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    worker: str | None = None
    #: What each field was called where it came from, for the refusal of a member's ``worker``.
    names: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __bool__(self) -> bool:
        return bool(
            self.payload
            or self.error is not None
            or self.created_after is not None
            or self.created_before is not None
            or self.worker is not None
        )

    def apply(self, jobs: QuerySet[Job], *, operator: bool) -> QuerySet[Job]:
        """``jobs`` (already scoped to what the user may see) narrowed by every filter.

        A member's ``worker`` filter is refused (``OperatorOnlyFilter``); a member's ``error``
        filter reads the error without its traceback, as they are shown it."""
        if self.worker is not None and not operator:
            name = self.names.get("worker", "worker")
            raise OperatorOnlyFilter(
                {name: "Only operators may search by worker; leave this filter out."}
            )
        for n, item in enumerate(self.payload):
            jobs = _payload_filtered(jobs, item, alias=f"_djj_payload_{n}")
        if self.error is not None:
            if operator:
                jobs = jobs.filter(error__icontains=self.error)
            else:
                jobs = jobs.alias(_djj_public_error=_public_error()).filter(
                    _djj_public_error__icontains=self.error
                )
        if self.created_after is not None:
            jobs = jobs.filter(created_at__gte=self.created_after)
        if self.created_before is not None:
            jobs = jobs.filter(created_at__lt=self.created_before)
        if self.worker is not None:
            # worker_id is NAME:ENGINE:TOKEN, and NAME may hold colons itself (host:pid).
            jobs = jobs.filter(
                worker_id__startswith=f"{self.worker}:",
                worker_id__regex=rf"^{re.escape(self.worker)}:[^:]*:[^:]*$",
            )
        return jobs


# -- the surfaces' spellings -------------------------------------------------------------------


def search_from_query(params: Any, *, now: datetime | None = None) -> JobSearch:
    """The search filters of the API's query parameters (a ``QueryDict`` or a mapping of
    lists): ``payload.<path>``, ``error``, ``created_after``, ``created_before``, ``worker``.
    Other parameters are left to the caller. Each may be given once."""
    pairs: list[tuple[str, str]] = []
    errors: dict[str, str] = {}
    for name in _keys(params):
        if name == "payload" or name.startswith(PAYLOAD_PREFIX) or name in PARAMETERS:
            values = _values(params, name)
            if len(values) > 1:
                errors[name] = "Given more than once: send it once."
                continue
            pairs.extend((name, value) for value in values)
    return _build(pairs, errors, now=now)


def search_from_words(text: str, *, now: datetime | None = None) -> tuple[JobSearch, str]:
    """The admin's search box: ``payload.<path>=<value>`` and ``word:value`` (``error:``,
    ``worker:``, ``since:``, ``until:``; ``created_after:`` and ``created_before:`` too), with
    double quotes around a value that holds spaces (``error:"connection reset"``). Returns the
    search and the other words, for the admin's own search (ids, kinds, owners, keys)."""
    words = _split_words(text)
    pairs: list[tuple[str, str]] = []
    rest: list[str] = []
    errors: dict[str, str] = {}
    names: dict[str, str] = {}  # parameter -> the word as typed (since, until, ...)
    for word in words:
        name, value = _word(word)
        if name is None:
            rest.append(word)
            continue
        shown = word.partition("=")[0] if name.startswith("payload") else word.partition(":")[0]
        if name in names:
            errors[shown] = "Given more than once: give it once."
            continue
        names[name] = shown
        pairs.append((name, value))
    search = _build(pairs, errors, now=now, names=names)
    return JobSearch(**{**_fields(search), "names": names}), " ".join(rest)


def search_from_options(
    *,
    payload: Sequence[str] = (),
    error: str | None = None,
    since: str | None = None,
    until: str | None = None,
    worker: str | None = None,
    now: datetime | None = None,
) -> JobSearch:
    """``jobs list``'s options: ``--payload PATH=VALUE`` (repeated: all must match),
    ``--error``, ``--since``, ``--until``, ``--worker``. Errors name the options."""
    errors: dict[str, str] = {}
    filters: list[PayloadFilter] = []
    seen: set[tuple[str, ...]] = set()
    for given in payload:
        path_text, sep, value = given.partition("=")
        path_text = path_text.removeprefix(PAYLOAD_PREFIX)
        if not sep:
            errors["--payload"] = (
                f"{_shown(given)} has no '=': give PATH=VALUE, as in --payload user.id=42."
            )
            continue
        try:
            item = payload_filter(path_text, value, name="--payload")
        except InvalidFilter as exc:
            errors.update(exc.errors)
            continue
        if item.path in seen:
            errors["--payload"] = f"{_shown(path_text)} is given more than once: give it once."
        seen.add(item.path)
        filters.append(item)
    names = {"error": "--error", "created_after": "--since", "created_before": "--until"}
    names["worker"] = "--worker"
    texts = {"error": error, "created_after": since, "created_before": until, "worker": worker}
    search = _build(
        [(k, v) for k, v in texts.items() if v is not None], errors, now=now, names=names
    )
    return JobSearch(**{**_fields(search), "payload": tuple(filters), "names": names})


# -- one value each ----------------------------------------------------------------------------


def parse_payload_path(text: str, *, name: str) -> tuple[str, ...]:
    """The keys of a payload path (``user.id`` -> ``("user", "id")``), or ``InvalidFilter``
    naming ``name``."""
    if not isinstance(text, str) or not text:
        raise InvalidFilter({name: "Name a payload field after 'payload.', as in payload.user=42."})
    keys = text.split(".")
    if len(keys) > MAX_DEPTH:
        raise InvalidFilter(
            {name: f"The path has {len(keys)} keys; search at most {MAX_DEPTH} levels deep."}
        )
    for key in keys:
        if not (_KEY.match(key) or _INDEX.match(key)):
            raise InvalidFilter(
                {
                    name: f"{_shown(key)} is not a key this search takes: a key is letters, "
                    "digits, '_' and '-', starting with a letter or '_' (digits alone index a "
                    "list), and keys are separated by single dots, as in payload.user.id=42."
                }
            )
    return tuple(keys)


def payload_values(text: str, *, name: str) -> tuple[Any, ...]:
    """The JSON values ``text`` matches (see the module's docstring)."""
    _check_text(text, name=name, empty_ok=True)
    if text == "":
        raise InvalidFilter(
            {name: 'Give a value; to match an empty string, send "" (two double quotes).'}
        )
    if text in ("true", "false", "null"):
        return (json.loads(text), text)
    if _NUMBER.match(text):
        number = json.loads(text)
        if isinstance(number, float) and not math.isfinite(number):
            return (text,)  # 1e999: no JSON number holds it; as text only
        return (number, text)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            quoted = json.loads(text)
        except ValueError:
            quoted = None
        if isinstance(quoted, str) and not _FORBIDDEN.search(quoted.replace("\t", " ")):
            return (quoted,)
        raise InvalidFilter(
            {
                name: "The quoted value is not a JSON string (or holds a control character): "
                'write it as JSON, as in "42", or leave the quotes out.'
            }
        )
    return (text,)


def payload_filter(path: str, value: str, *, name: str) -> PayloadFilter:
    """``payload.<path>=<value>`` parsed; errors name ``name``."""
    return PayloadFilter(
        path=parse_payload_path(path, name=name), values=payload_values(value, name=name)
    )


def parse_when(text: str, *, name: str, now: datetime | None = None) -> datetime:
    """An instant: ISO 8601 (naive: the current time zone) or a duration back from ``now``."""
    _check_text(text, name=name)
    text = text.strip()
    try:
        return (now or clock.now()) - parse_duration(text, name=name)
    except (InvalidDuration, OverflowError):
        pass  # not a duration (or one reaching before year 1): read as ISO 8601
    try:
        when = datetime.fromisoformat(text)
        if timezone.is_naive(when):
            when = timezone.make_aware(when, timezone.get_current_timezone())
        # The databases compare in UTC: an instant out of its range is refused here.
        when.astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidFilter({name: f"{_shown(text)} is not a time: send {_WHEN_HINT}."}) from None
    return when


# -- helpers -----------------------------------------------------------------------------------


def _build(
    pairs: Iterable[tuple[str, str]],
    errors: dict[str, str],
    *,
    now: datetime | None,
    names: Mapping[str, str] | None = None,
) -> JobSearch:
    """A ``JobSearch`` from (parameter, text) pairs, the API's names; every error at once."""
    names = names or {}
    payload: list[PayloadFilter] = []
    found: dict[str, Any] = {}
    now = now or clock.now()
    for parameter, text in pairs:
        shown = names.get(parameter, parameter)
        try:
            if parameter == "payload" or parameter.startswith(PAYLOAD_PREFIX):
                path = parameter[len(PAYLOAD_PREFIX) :] if parameter != "payload" else ""
                payload.append(payload_filter(path, text, name=shown))
            elif parameter in ("created_after", "created_before"):
                found[parameter] = parse_when(text, name=shown, now=now)
            elif parameter == "error":
                found["error"] = _check_text(text, name=shown)
            elif parameter == "worker":
                found["worker"] = _check_text(text, name=shown, limit=MAX_WORKER).strip()
        except InvalidFilter as exc:
            errors.update(exc.errors)
    after, before = found.get("created_after"), found.get("created_before")
    if after is not None and before is not None and after >= before:
        errors[names.get("created_before", "created_before")] = (
            f"It is not later than {names.get('created_after', 'created_after')} "
            f"({after.isoformat()}): no job was created in between. Swap them, or widen the range."
        )
    if errors:
        raise InvalidFilter(errors)
    return JobSearch(payload=tuple(payload), **found)


def _check_text(text: str, *, name: str, limit: int = MAX_TEXT, empty_ok: bool = False) -> str:
    if not isinstance(text, str):
        raise InvalidFilter({name: "Send text."})
    if not empty_ok and not text.strip():
        raise InvalidFilter({name: "Empty: give a value, or leave the filter out."})
    if len(text) > limit:
        raise InvalidFilter({name: f"{len(text)} characters: send at most {limit}."})
    found = _FORBIDDEN.search(text)
    if found is not None:
        raise InvalidFilter(
            {
                name: f"Holds the character U+{ord(found.group()):04X}: control characters and "
                "lone surrogates are refused; send printable text."
            }
        )
    return text


_WORDS = re.compile(r'\s+|(?:[^\s"]+|"(?:[^"\\]|\\.)*")+|"')


def _split_words(text: str) -> list[str]:
    """The search box's words: split at spaces, except inside double quotes (kept)."""
    words = []
    for match in _WORDS.finditer(text):
        word = match.group()
        if word == '"':
            raise InvalidFilter(
                {"search": 'A quote is not closed: close it, as in error:"connection reset".'}
            )
        if not word.isspace():
            words.append(word)
    return words


def _unquoted(value: str) -> str:
    """A ``word:"value"``'s value without its quotes (JSON escapes read)."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            text = json.loads(value)
        except ValueError:
            return value[1:-1]
        return text if isinstance(text, str) else value[1:-1]
    return value


def _word(word: str) -> tuple[str | None, str]:
    """A search word as (parameter, value), or (None, word) for a plain word."""
    if word.startswith(PAYLOAD_PREFIX) or word.startswith("payload="):
        path, sep, value = word.partition("=")
        if sep:
            return path, value
        return path, ""  # "payload.user": no value; _build says so
    head, sep, value = word.partition(":")
    if sep and head in WORDS:
        return WORDS[head], _unquoted(value)
    return None, word


def _payload_filtered(jobs: QuerySet[Job], item: PayloadFilter, *, alias: str) -> QuerySet[Job]:
    # Key transforms built one key at a time (never a "payload__a__b" lookup string, where a
    # key named "contains" or holding "__" would read as a lookup); filtered through an alias,
    # so that the comparison is JSONField's (a JSON value, None a JSON null) on both databases.
    transform: Any = F("payload")
    for key in item.path:
        transform = KeyTransform(key, transform)
    condition = Q()
    for value in item.values:
        condition |= Q(**{alias: value})
    return jobs.alias(**{alias: transform}).filter(condition)


def _public_error() -> Case:
    """The error as a member is shown it: the text before the traceback (``public_error``)."""
    at = StrIndex("error", Value(TRACEBACK_MARKER))
    return Case(
        When(GreaterThan(at, 0), then=Substr("error", 1, at - 1)),
        default=F("error"),
        output_field=TextField(),
    )


def _keys(params: Any) -> list[str]:
    return list(params.keys())


def _values(params: Any, name: str) -> list[str]:
    if hasattr(params, "getlist"):
        return list(params.getlist(name))
    value = params[name]
    return list(value) if isinstance(value, list | tuple) else [value]


def _fields(search: JobSearch) -> dict[str, Any]:
    return {
        "payload": search.payload,
        "error": search.error,
        "created_after": search.created_after,
        "created_before": search.created_before,
        "worker": search.worker,
    }


def _shown(text: str) -> str:
    """``text`` quoted for a message, escaped and cut short."""
    text = text if len(text) <= 40 else text[:37] + "..."
    return json.dumps(text)
