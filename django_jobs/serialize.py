"""A job as JSON: the one definition shared by the API, events, CLI, admin and Tasks results.

``JOB_FIELDS`` lists the fields, in order, each with where its value comes from, its JSON type
and what a member sees of it (``BODY_FIELDS`` the payload and result, ``STEP_FIELDS`` a step's).
Everything that shows a job is made from those lists:

- ``job_json(job, view=...)``: the dict (API, CLI, MCP, admin, demo page);
- ``member_view(data)``: an operator's job dict as its owner may see it (the live events store
  the operator's text and give members this view of it, see ``events.payloads``);
- ``compile_text_encoder()``: a function writing the same JSON text as encoding the dict, for
  the worker's hot path, generated from the list (a field added to the list is in every one);
- the API's response serializers, for its OpenAPI schema (``api.fields.api_field``).

Two views: ``OPERATOR`` sees everything; ``MEMBER`` (a job's owner who is not an operator)
never sees a server traceback (it names server files and source lines), nor the fields marked
``operators_only`` (``worker`` and ``worker_pid``: which worker and process run a job is
operators' business, as ``GET workers/`` is). ``member_view`` and ``member_text`` are the one
place that decides it.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder

from .attempt_history import MEMBER_ATTEMPT_KEYS, attempt_history
from .conf import jobs_settings
from .models import Job, worker_name, worker_pid
from .permissions import is_operator
from .states import ENDED_STATES, EXPIRED_ERROR, JobState

if TYPE_CHECKING:
    from .models import Job, JobStep


class View(enum.Enum):
    """Who reads the job: what the JSON leaves out depends on it."""

    OPERATOR = "operator"
    MEMBER = "member"


def view_for(user: Any) -> View:
    """The view ``user`` gets of the jobs they may read: operators see everything."""
    return View.OPERATOR if is_operator(user) else View.MEMBER


TRACEBACK_MARKER = "\n\nTraceback (most recent call last):"


def public_error(error: str | None) -> str | None:
    """The error without its traceback: what a job's owner sees (operators see it all)."""
    if error is None:
        return None
    return error.split(TRACEBACK_MARKER, 1)[0]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _ended_error(job: Job) -> str | None:
    if job.state in (JobState.FAILED, JobState.BLOCKED, JobState.UNKNOWN):
        return job.error
    # A cancelled job's error says why only when it expired (an earlier attempt's error,
    # kept on a retry's row, is not the reason it was cancelled).
    if job.state == JobState.CANCELLED and job.error == EXPIRED_ERROR:
        return EXPIRED_ERROR
    return None


def _wait_reason(job: Job) -> str | None:
    return job.wait_reason if job.state == JobState.WAITING else None


def _cancel_requested(job: Job) -> bool:
    # SPEC §7: from the moment a cancel of a running job is accepted until it ends.
    return bool(job.cancel_requested) and job.state not in ENDED_STATES


def _worker(job: Job) -> str | None:
    if job.state != JobState.RUNNING:
        return None
    return worker_name(job.worker_id)


def _worker_pid(job: Job) -> int | None:
    if job.state != JobState.RUNNING:
        return None
    return worker_pid(job.worker_id)


def _progress(key: str) -> Callable[[Job], Any]:
    def get(job: Job) -> Any:
        progress = job.progress
        return progress.get(key) if progress else None

    return get


def children_counts(job_ids: list[int], alias: str | None = None) -> dict[int, dict[str, int]]:
    """The children of these jobs counted per state, with ``total``: one query for them all."""
    from django.db.models import Count

    counts: dict[int, dict[str, int]] = {}
    if not job_ids:
        return counts
    rows = (
        Job.objects.using(alias or jobs_settings.DATABASE)
        .filter(parent_id__in=job_ids)
        .order_by()
        .values_list("parent_id", "state")
        .annotate(n=Count("id"))
    )
    for parent_id, state, n in rows:
        counts.setdefault(parent_id, {})[state] = n
    # States in their lifecycle order (JobState), then the total: stable for every reader.
    order = {state: n for n, state in enumerate(JobState.values)}
    return {
        parent_id: {
            **dict(sorted(found.items(), key=lambda item: order.get(item[0], len(order)))),
            "total": sum(found.values()),
        }
        for parent_id, found in counts.items()
    }


def attach_children(jobs: list[Any]) -> None:
    """Count the children of the parents among ``jobs`` in one query, for their JSON (a list
    page calls this once, instead of one query per parent)."""
    parents = [job for job in jobs if getattr(job, "children_total", 0)]
    counts = children_counts([job.pk for job in parents])
    for job in parents:
        job.__dict__["_children"] = counts.get(job.pk, {"total": 0})


def _children(job: Job) -> dict[str, int] | None:
    # None for a job that never had children (read from its own row: no query). A parent's
    # counts are read now (one query), unless a list attached them (``attach_children``):
    # never cached on the job, whose children keep ending.
    if not getattr(job, "children_total", 0):
        return None
    attached = job.__dict__.get("_children")
    if attached is not None:
        return attached
    return children_counts([job.pk]).get(job.pk, {"total": 0})


class JsonType(enum.Enum):
    """What a field's JSON value is: the API's schema is made from it (``api.fields``)."""

    INTEGER = "integer"
    NUMBER = "number"
    STRING = "string"
    BOOLEAN = "boolean"
    INSTANT = "date-time"  # a datetime, written as ISO 8601 text
    ANY = "any JSON"  # a payload or a result: whatever was given
    JOB_STATE = "a JobState"
    STEP_STATE = "a StepState"
    OWNER = "the owner's key"  # an integer or a string, as the user model's primary key is
    COUNTS = "counts"  # an object of integers
    OBJECT = "object"  # the field's ``parts``
    ATTEMPTS = "attempts"  # a list of attempts (``ATTEMPT_KEYS``), oldest first


@dataclass(frozen=True, slots=True)
class JobField:
    """One key of the job JSON (or of a step's): where its value comes from, its JSON type and
    what a member sees of it."""

    name: str
    #: An attribute of the job, or a function of the job giving the value.
    source: str | Callable[[Any], Any] = ""
    type: JsonType = JsonType.STRING
    #: ``True`` when the value may be null.
    null: bool = False
    #: What the API's schema says of the field, when its name does not say enough.
    help: str = ""
    #: What a member sees instead of the value (a function of the operator's value).
    member: Callable[[Any], Any] | None = None
    #: Text that the member's view can only differ by when the operator's JSON holds it: the
    #: events skip making a member text that would be the same (see ``member_may_differ``).
    member_hint: str = ""
    #: A nested object's keys (``source`` unused; ``type`` is ``OBJECT``).
    parts: tuple[JobField, ...] = ()
    #: Left out of the member's view altogether (the key with it), for operators' eyes only.
    operators_only: bool = False

    @property
    def instant(self) -> bool:
        """A datetime, written as ISO 8601 text."""
        return self.type is JsonType.INSTANT

    def value(self, job: Any) -> Any:
        if self.parts:
            return {part.name: part.value(job) for part in self.parts}
        raw = getattr(job, self.source) if isinstance(self.source, str) else self.source(job)
        return _iso(raw) if self.instant else raw


#: The job JSON, in order (SPEC §7), without the body (``BODY_FIELDS``) and ``deduped``, which
#: ``job_json`` adds where they belong. A field without a type is a string.
JOB_FIELDS: tuple[JobField, ...] = (
    JobField("id", "pk", JsonType.INTEGER),
    JobField("kind", "kind"),
    JobField("queue", "queue"),
    JobField("engine", "engine"),
    JobField("state", "state", JsonType.JOB_STATE),
    JobField("owner", "owner_id", JsonType.OWNER, null=True),
    JobField("tenant", "tenant", null=True),
    JobField("priority", "priority", JsonType.INTEGER),
    JobField("attempts", "attempts", JsonType.INTEGER),
    JobField("max_attempts", "max_attempts", JsonType.INTEGER),
    JobField(
        "progress",
        type=JsonType.OBJECT,
        parts=(
            JobField("stage", _progress("stage"), null=True),
            JobField("percent", _progress("percent"), JsonType.NUMBER, null=True),
        ),
    ),
    JobField(
        "error",
        _ended_error,
        null=True,
        member=public_error,
        member_hint=TRACEBACK_MARKER.strip(),
    ),
    JobField("wait_reason", _wait_reason, null=True),
    JobField("run_at", "run_at", JsonType.INSTANT, null=True),
    JobField("created_at", "created_at", JsonType.INSTANT, null=True),
    JobField("started_at", "started_at", JsonType.INSTANT, null=True),
    JobField("ended_at", "ended_at", JsonType.INSTANT, null=True),
    JobField("timestamps_derived", "timestamps_derived", JsonType.BOOLEAN),
    JobField("idempotency_key", "idempotency_key", null=True),
    JobField(
        "expires_at",
        "expires_at",
        JsonType.INSTANT,
        null=True,
        help='Not started by then, the job ends cancelled with the error "expired"; or null.',
    ),
    JobField(
        "parent",
        "parent_id",
        JsonType.INTEGER,
        null=True,
        help="The job that spawned this one, or null.",
    ),
    JobField(
        "children",
        _children,
        JsonType.COUNTS,
        null=True,
        help="Null for a job without children; else their count per state, and total.",
    ),
    JobField(
        "cancel_requested",
        _cancel_requested,
        JsonType.BOOLEAN,
        help="True from the moment a cancel of the running job is accepted until it ends.",
    ),
    JobField(
        "worker",
        _worker,
        null=True,
        help=(
            "Operators only: the name of the worker running the job (GET workers/); null when "
            "not running. Members never get this key."
        ),
        operators_only=True,
    ),
    JobField(
        "worker_pid",
        _worker_pid,
        JsonType.INTEGER,
        null=True,
        help=(
            "Operators only: the id of the process running the job (a worker process of "
            "``worker``, see its ``processes_detail``); null when not running. Members never "
            "get this key."
        ),
        operators_only=True,
    ),
)

#: The job's body: in the API's answers, not in the events.
BODY_FIELDS: tuple[JobField, ...] = (
    JobField("payload", "payload", JsonType.ANY, null=True),
    JobField("result", "result", JsonType.ANY, null=True),
    JobField(
        "attempt_history",
        lambda job: attempt_history(job.attempt_history),
        JsonType.ATTEMPTS,
        help=(
            "Each run of the job, oldest first (the newest 50): attempt, started_at, ended_at, "
            "outcome and error (its first line); for operators also worker, pid and traceback."
        ),
        member=lambda entries: [member_attempt(entry) for entry in entries],
    ),
)

#: A durable step, as a job's detail lists it.
STEP_FIELDS: tuple[JobField, ...] = (
    JobField("name", "name"),
    JobField("state", "state", JsonType.STEP_STATE),
    JobField("attempts", "attempts", JsonType.INTEGER),
    JobField("started_at", "started_at", JsonType.INSTANT, null=True),
    JobField("ended_at", "ended_at", JsonType.INSTANT, null=True),
    JobField("error", "error", null=True),
)


def member_attempt(entry: dict[str, Any]) -> dict[str, Any]:
    """An attempt as the job's owner sees it: no worker, no process, the error's first line
    (never a traceback)."""
    item = {key: entry.get(key) for key in MEMBER_ATTEMPT_KEYS}
    error = item["error"]
    if isinstance(error, str):
        item["error"] = public_error(error).split("\n", 1)[0]  # type: ignore[union-attr]
    return item


_MEMBER_FIELDS = tuple(field for field in JOB_FIELDS if field.member is not None)
#: The keys of the job JSON that a member's view leaves out.
OPERATORS_ONLY: frozenset[str] = frozenset(f.name for f in JOB_FIELDS if f.operators_only)


def job_json(
    job: Job,
    *,
    view: View = View.OPERATOR,
    payload: bool = True,
    deduped: bool | None = None,
) -> dict[str, Any]:
    """The job's JSON as ``view`` sees it; without ``payload`` and ``result`` when
    ``payload=False`` (events); with ``deduped`` when given (a submit's answer)."""
    data = {field.name: field.value(job) for field in JOB_FIELDS}
    if view is View.MEMBER:
        data = member_view(data)
    if payload:
        for field in BODY_FIELDS:
            value = field.value(job)
            if view is View.MEMBER and field.member is not None:
                value = field.member(value)
            data[field.name] = value
    if deduped is not None:
        data["deduped"] = deduped
    return data


def member_view(data: dict[str, Any]) -> dict[str, Any]:
    """An operator's job dict (from ``job_json``) as the job's owner sees it: without the
    operators' fields, and each field's member value."""
    changed = {
        field.name: field.member(data[field.name])  # type: ignore[misc]
        for field in _MEMBER_FIELDS
        if field.name in data
    }
    return {
        name: value for name, value in {**data, **changed}.items() if name not in OPERATORS_ONLY
    }


def member_may_differ(text: str) -> bool:
    """Could the member's view of this operator JSON text differ from it, beyond the
    operators' fields (``without_operators_fields``)? Cheap: no parse."""
    return any(field.member_hint in text for field in _MEMBER_FIELDS)


_DECODER = json.JSONDecoder()


def without_operators_fields(text: str) -> str:
    """An event's text (compact, as ``event_text`` writes it) without the job's
    ``operators_only`` keys; their values are read, the rest of the text is not parsed.

    A key is found by its text ``,"worker":``: in the compact JSON a quote inside a string is
    escaped (``\\"``), so only the job's own key is written so, and never the first key of
    the job (``id`` is)."""
    for name in OPERATORS_ONLY:
        marker = f',"{name}":'
        start = text.find(marker)
        if start < 0:
            continue
        _value, end = _DECODER.raw_decode(text, start + len(marker))
        text = text[:start] + text[end:]
    return text


def step_json(step: JobStep) -> dict[str, Any]:
    return {field.name: field.value(step) for field in STEP_FIELDS}


def job_detail_json(job: Job, *, view: View = View.OPERATOR) -> dict[str, Any]:
    """``GET {id}/``: the job with its ``steps`` and ``log``."""
    data = job_json(job, view=view)
    data["steps"] = [step_json(s) for s in job.steps.all()]
    data["log"] = list(job.log or [])
    return data


# -- the generated text encoder -----------------------------------------------------------------

#: Compact JSON as every job text is written (an encoder keeps no state between calls).
ENCODER = DjangoJSONEncoder(separators=(",", ":"))


def encode(data: Any) -> str:
    """Compact JSON text, as the events send it."""
    return ENCODER.encode(data)


def json_value(value: Any) -> str:
    """The JSON of one value, as ``ENCODER`` writes it; common types without its machinery."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    return ENCODER.encode(value)


def json_instant(value: datetime | None) -> str:
    """The JSON of a datetime field: its ISO 8601 text (which needs no escaping), or null.

    Why it is more than ``value.isoformat()`` (each measured with ``timeit``; a worker makes
    nine instants' texts per job, for its ``job.started`` and its end):

    - Texts are kept by the datetime's identity (the object is kept with it, so its id is not
      reused meanwhile): a job's ``created_at`` and ``run_at`` are the same objects in both of
      its events, and the jobs of one ``enqueue_many`` share theirs.
    - A UTC datetime (every one the engine makes, and Django's with ``USE_TZ``) is written as
      its naive text plus ``+00:00``: the same text, 1.2 us instead of 2.0 (``isoformat`` of
      an aware datetime asks its ``tzinfo`` for the offset and formats it).
    """
    if value is None:
        return "null"
    kept = _instants.get(id(value))
    if kept is not None and kept[0] is value:
        return kept[1]
    if value.tzinfo is UTC:
        text = f'"{value.replace(tzinfo=None).isoformat()}+00:00"'
    else:
        text = f'"{value.isoformat()}"'
    if len(_instants) >= _INSTANTS_KEPT:
        _instants.clear()
    _instants[id(value)] = (value, text)
    return text


#: The last instants' texts, by id (``json_instant``); emptied when full. Another thread may
#: clear it between a lookup and a store: the next call formats again.
_instants: dict[int, tuple[datetime, str]] = {}
#: A worker makes about six new instants per job between its ``job.started`` and its end,
#: with up to a few hundred jobs between the two: 4,096 keep a job's ``created_at`` and
#: ``run_at`` until its end's text (about 0.6 MB).
_INSTANTS_KEPT = 4096


#: Column types whose JSON the generated encoder writes without ``json_value``'s dispatch: a
#: non-null string column is one C call (``encode_basestring_ascii``), an integer its ``repr``,
#: a boolean a choice of two words.
_STRINGS = (JsonType.STRING, JsonType.JOB_STATE, JsonType.STEP_STATE)


def _column_json(field: JobField, expr: str, slot: str) -> str:
    """The f-string expression writing ``expr`` (a column of the job) as ``field`` declares
    it; a nullable column is first bound to ``slot``. Only columns are written by type: a
    function's value (progress, error, children) is whatever it returns, so it goes through
    ``_value``."""
    if field.instant:
        return f"_instant({expr})"
    if field.type in _STRINGS:
        write = "_text({})".format
    elif field.type is JsonType.INTEGER:
        write = "_int({})".format
    elif field.type is JsonType.BOOLEAN:
        write = '("true" if {} else "false")'.format
    else:
        return f"_value({expr})"
    if not field.null:
        return write(expr)
    # Double quotes: the text is one f'...' string, and Python 3.11 allows no nested '.
    return f'("null" if ({slot} := {expr}) is None else {write(slot)})'


def compile_text_encoder(fields: tuple[JobField, ...] = JOB_FIELDS) -> Callable[[Job], str]:
    """A function ``job -> text`` equal to ``encode(job_json(job, payload=False))``.

    Generated from ``fields`` as one f-string (the fastest way to build the text in Python):
    no dict, no encoder walk; a column is written as its declared type says
    (``_column_json``). A property test holds it equal to the dict's encoding. Writing
    columns by type instead of through ``json_value`` took a queued job's text from 3.0 to
    2.4 us (``timeit``), and a job has three texts (job.created, job.started, its end):
    ``enqueue_many`` with live events on went from 18.1 to 17.6 us of CPU per job.
    """
    namespace: dict[str, Any] = {
        "_value": json_value,
        "_instant": json_instant,
        "_text": encode_basestring_ascii,
        "_int": int.__repr__,
    }

    def object_source(parts: tuple[JobField, ...], prefix: str) -> str:
        pieces = []
        for n, field in enumerate(parts):
            key = f"{encode_basestring_ascii(field.name)}:"
            if field.parts:
                pieces.append(key + object_source(field.parts, f"{prefix}{n}_"))
                continue
            if isinstance(field.source, str):
                expr = _column_json(field, f"job.{field.source}", f"_v{prefix}{n}")
            else:
                namespace[f"{prefix}{n}"] = field.source
                expr = f"_value({prefix}{n}(job))"
            pieces.append(f"{key}{{{expr}}}")
        return "{{" + ",".join(pieces) + "}}"

    source = f"def job_text(job):\n    return f'{object_source(fields, '_f')}'\n"
    exec(compile(source, "<django_jobs job_text>", "exec"), namespace)
    return namespace["job_text"]


#: ``job_text(job)``: the operator's job JSON text without payload and result (the events').
job_text = compile_text_encoder()


# -- the event JSON -----------------------------------------------------------------------------


def event_data(
    event_type: str,
    job: Job,
    at: datetime,
    line: str | None = None,
    *,
    view: View = View.OPERATOR,
) -> dict[str, Any]:
    """The event as a dict: ``type``, ``job`` (no payload, no result), ``at`` and maybe ``line``."""
    data: dict[str, Any] = {
        "type": event_type,
        "job": job_json(job, view=view, payload=False),
        "at": at.isoformat(),
    }
    if event_type == "job.log":
        data["line"] = line
    return data


def event_text(event_type: str, job: Job, at: datetime, line: str | None = None) -> str:
    """``encode(event_data(...))``: the operator's text, the one stored (the worker makes two
    or more per job, so the job's part comes from the generated ``job_text``)."""
    text = f'{{"type":{json_value(event_type)},"job":{job_text(job)},"at":{json_instant(at)}'
    if event_type == "job.log":
        return f'{text},"line":{json_value(line)}}}'
    return text + "}"
