"""Request and response shapes of the API.

Requests are validated by these serializers. Responses are built by ``django_jobs.serialize``
(one job JSON shared by the API, the admin, the CLI and the events); the response serializers
here describe that JSON for the OpenAPI schema, and the tests hold the two together.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import models
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import clock
from ..durations import format_duration, parse_duration
from ..engine import schedules
from ..engine.admission import MAX_RUN_AHEAD, MAX_RUN_AHEAD_WORDS, run_ahead_message
from ..exceptions import InvalidDuration, InvalidSchedule
from ..models import Job, Schedule
from ..serialize import BODY_FIELDS, JOB_FIELDS, STEP_FIELDS, JobField, JsonType
from ..states import WORKER_LOST, JobState, StepState, WorkerState
from ..validation import key_problem

PRIORITY_MIN, PRIORITY_MAX = -32768, 32767  # Job.priority is a SmallIntegerField
_KEY_LENGTH = Job._meta.get_field("idempotency_key").max_length
_KIND_LENGTH = Job._meta.get_field("kind").max_length
_QUEUE_LENGTH = Job._meta.get_field("queue").max_length


def _string_field(name: str, schema: dict[str, Any]) -> type[serializers.CharField]:
    """A read-only string field with a hand-written schema."""
    return extend_schema_field(schema)(type(name, (serializers.CharField,), {}))


JobStateField = _string_field(
    "JobStateField",
    {"type": "string", "enum": list(JobState.values), "description": "The job's state."},
)
# Not an enum: two enums under one property name ("state") would make drf-spectacular name
# the job's with a hash in any project-wide schema. A pattern says the same.
StepStateField = _string_field(
    "StepStateField",
    {
        "type": "string",
        "pattern": "^(" + "|".join(StepState.values) + ")$",
        "description": "The step's state: " + ", ".join(StepState.values) + ".",
    },
)


def owner_field(**kwargs: Any) -> serializers.Field:
    """The owner's primary key as JSON: an integer for integer keys, else a string."""
    pk = get_user_model()._meta.pk
    if isinstance(pk, models.IntegerField | models.AutoField):
        return serializers.IntegerField(**kwargs)
    return serializers.CharField(**kwargs)


# --- request fields ------------------------------------------------------------------------


class KnownFieldsOnly(serializers.Serializer):
    """Refuses a body field it does not accept, naming it: a misspelt or read-only field
    (``owner``, ``max_attempts``) is an error, not silently dropped."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            writable = sorted(name for name, f in self.fields.items() if not f.read_only)
            unknown = sorted(set(data) - set(writable))
            if unknown:
                accepted = ", ".join(writable)
                raise serializers.ValidationError(
                    {
                        name: [f"Unknown field: this request accepts only {accepted}."]
                        for name in unknown
                    },
                    code="unknown_field",
                )
        return super().to_internal_value(data)


def _valid_key(value: str) -> None:
    problem = key_problem(value)
    if problem is not None:
        raise serializers.ValidationError(problem)


def _within_run_ahead(value: datetime) -> None:
    if value - clock.now() > MAX_RUN_AHEAD:
        raise serializers.ValidationError(
            run_ahead_message(f"run_at {value.isoformat()}"), code="too_far"
        )


class StrictCharField(serializers.CharField):
    """A string, and only a string: 5 is not "5"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean only: ``"yes"``, ``1`` or ``"true"`` are refused, not guessed at."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date-time that carries its UTC offset ("2026-03-08T07:30:00+01:00" or "Z")."""

    default_error_messages = {
        "invalid": (
            'Write an ISO 8601 date-time with its UTC offset, e.g. "2026-03-08T07:30:00+01:00" '
            'or "2026-03-08T06:30:00Z".'
        ),
        "naive": (
            "This date-time has no UTC offset. Add one, e.g. +01:00 or Z, so it names one instant."
        ),
        "overflow": "This date-time is out of range; use a year between 1 and 9998.",
    }

    def to_internal_value(self, value: Any) -> datetime:
        if not isinstance(value, str):
            self.fail("invalid")
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            parsed = None
        if parsed is None:
            self.fail("invalid")
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail("naive")
        try:
            return parsed.astimezone(UTC)
        except (OverflowError, ValueError):
            self.fail("overflow")
        raise AssertionError("unreachable")  # pragma: no cover


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d|w)\s*$"},
            {"type": "number", "minimum": 0},
        ],
        "example": "30s",
    }
)
class DurationInputField(serializers.Field):
    """A duration: "250ms", "30s", "5m", "2h", "3d", "1w", or a number of seconds."""

    default_error_messages = {
        "too_far": run_ahead_message("This delay"),
    }

    def to_internal_value(self, data: Any) -> timedelta:
        if isinstance(data, bool) or not isinstance(data, str | int | float):
            raise serializers.ValidationError(_duration_help(data))
        try:
            value = parse_duration(data, name="delay")
        except InvalidDuration as exc:
            raise serializers.ValidationError(exc.message) from None
        except OverflowError:
            self.fail("too_far")
        if value > MAX_RUN_AHEAD:
            self.fail("too_far")
        return value

    def to_representation(self, value: Any) -> Any:
        return value.total_seconds() if isinstance(value, timedelta) else value


def _duration_help(value: Any) -> str:
    return (
        f"{value!r} is not a duration. Write a number with a unit "
        '("250ms", "30s", "5m", "2h", "3d", "1w") or a number of seconds.'
    )


# --- requests ------------------------------------------------------------------------------


class SubmitSerializer(KnownFieldsOnly):
    """``POST /``: submit a job. Members may not set ``priority`` or ``queue``."""

    kind = StrictCharField(max_length=_KIND_LENGTH, help_text="The kind to run.")
    payload = serializers.JSONField(
        required=False, allow_null=True, default=None, help_text="The job's input (any JSON)."
    )
    run_at = AwareDateTimeField(
        required=False,
        allow_null=True,
        validators=[_within_run_ahead],
        help_text=f"Run at this instant (with a UTC offset), at most {MAX_RUN_AHEAD_WORDS} ahead.",
    )
    delay = DurationInputField(
        required=False,
        allow_null=True,
        help_text=f'Run after this delay: "30s", "5m" or seconds; at most {MAX_RUN_AHEAD_WORDS}.',
    )
    priority = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=PRIORITY_MIN,
        max_value=PRIORITY_MAX,
        help_text="Operators only. Lower runs first; default: the kind's.",
    )
    queue = StrictCharField(
        required=False,
        allow_null=True,
        max_length=_QUEUE_LENGTH,
        help_text="Operators only. Default: the kind's queue.",
    )
    idempotency_key = StrictCharField(
        required=False,
        allow_null=True,
        max_length=_KEY_LENGTH,
        validators=[_valid_key],
        help_text="Same as the Idempotency-Key header (no control characters). Default: the "
        "kind's own key.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("run_at") is not None and attrs.get("delay") is not None:
            raise serializers.ValidationError(
                {"delay": ["Send run_at or delay, not both."]}, code="exclusive"
            )
        return attrs


class CancelSerializer(KnownFieldsOnly):
    """``POST /{id}/cancel/``: an empty JSON object (or an empty body sent as JSON)."""


class RetrySerializer(KnownFieldsOnly):
    """``POST /{id}/retry/``."""

    from_step = StrictCharField(
        required=False,
        allow_null=True,
        max_length=200,
        help_text="Forget this step and the ones after it, so they run again.",
    )
    children = StrictBooleanField(
        required=False,
        default=False,
        help_text="Also retry the failed and cancelled children, down the tree; the job "
        "waits for them again. Operators only.",
    )


# --- responses -----------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every refusal: a stable code and a message that says what to do next."""

    code = serializers.CharField(read_only=True)
    message = serializers.CharField(read_only=True)
    # The SPEC's field names (errors, parent, label) are attributes of DRF's own classes too.
    errors = serializers.DictField(  # type: ignore[assignment]
        required=False, help_text="Field errors, by field name (400 only)."
    )


def _counts_field(**options: Any) -> serializers.Field:
    return serializers.DictField(child=serializers.IntegerField(), **options)


#: The serializer field that describes each JSON type of ``serialize`` (``OBJECT`` aside).
_FIELD_OF_TYPE: dict[JsonType, Callable[..., serializers.Field]] = {
    JsonType.INTEGER: serializers.IntegerField,
    JsonType.NUMBER: serializers.FloatField,
    JsonType.STRING: serializers.CharField,
    JsonType.BOOLEAN: serializers.BooleanField,
    JsonType.INSTANT: serializers.DateTimeField,
    JsonType.ANY: serializers.JSONField,
    JsonType.JOB_STATE: JobStateField,
    JsonType.STEP_STATE: StepStateField,
    JsonType.OWNER: owner_field,
    JsonType.COUNTS: _counts_field,
}


def api_field(field: JobField) -> serializers.Field:
    """The read-only serializer field that describes ``field`` of the job JSON in the schema."""
    options: dict[str, Any] = {"read_only": True}
    if field.null:
        options["allow_null"] = True
    if field.help:
        options["help_text"] = field.help
    if field.type is JsonType.OBJECT:
        # Named after the field ("ProgressSerializer"): drf-spectacular names the component so.
        nested = type(
            f"{field.name.capitalize()}Serializer",
            (serializers.Serializer,),
            {part.name: api_field(part) for part in field.parts},
        )
        return nested(**options)
    return _FIELD_OF_TYPE[field.type](**options)


class JsonShapeSerializer(serializers.Serializer):
    """A serializer whose fields are made from a ``serialize`` field list (``json_fields``),
    then its own declared fields: the schema describes the JSON that list makes, so the two
    cannot disagree. The fields are made when first asked for, not at import: the owner's
    type depends on the user model."""

    json_fields: tuple[JobField, ...] = ()

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = {field.name: api_field(field) for field in self.json_fields}
        fields.update(super().get_fields())
        return fields


class JobSerializer(JsonShapeSerializer):
    """A job, as ``django_jobs.serialize.job_json`` renders it."""

    json_fields = JOB_FIELDS + BODY_FIELDS


class SubmittedJobSerializer(JobSerializer):
    """The job a submit returns; ``deduped`` is true when a live job held the key."""

    deduped = serializers.BooleanField(read_only=True)


class StepSerializer(JsonShapeSerializer):
    """A durable step of a job, as ``django_jobs.serialize.step_json`` renders it."""

    json_fields = STEP_FIELDS


class JobDetailSerializer(JobSerializer):
    """A job with its durable steps and the tail of its log."""

    steps = StepSerializer(many=True, read_only=True)
    log = serializers.ListField(child=serializers.CharField(), read_only=True)


class KindSerializer(serializers.Serializer):
    """A kind's manifest row (``JobHandle.describe()``)."""

    kind = serializers.CharField(read_only=True)
    label = serializers.CharField(read_only=True)  # type: ignore[assignment]  # as errors
    group = serializers.CharField(read_only=True)
    member_safe = serializers.BooleanField(read_only=True)
    schedulable = serializers.BooleanField(read_only=True)
    queue = serializers.CharField(read_only=True)
    engine = serializers.CharField(read_only=True)
    concurrency = serializers.IntegerField(read_only=True)
    priority = serializers.IntegerField(read_only=True)
    retry = serializers.DictField(read_only=True, help_text="The retry policy.")
    timeout = serializers.FloatField(read_only=True, allow_null=True, help_text="Seconds.")
    time_limit = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="Seconds: the hard time limit (timeout plus JOBS['KILL_GRACE'] by default).",
    )
    version = serializers.CharField(read_only=True)
    input = serializers.DictField(
        read_only=True, allow_null=True, help_text="JSON Schema of the payload, if declared."
    )
    on = serializers.CharField(read_only=True, allow_null=True)
    rate = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text='Starts allowed per window across all workers, e.g. "100/m"; or null.',
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["async"] = serializers.BooleanField(read_only=True)  # a keyword in Python
        return fields


class LatencySerializer(serializers.Serializer):
    p50 = serializers.FloatField(read_only=True, allow_null=True)
    p95 = serializers.FloatField(read_only=True, allow_null=True)
    p99 = serializers.FloatField(read_only=True, allow_null=True)
    sample = serializers.IntegerField(read_only=True)


class QueueStatsSerializer(serializers.Serializer):
    queue = serializers.CharField(read_only=True)
    states = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    oldest_due_age_s = serializers.FloatField(read_only=True, allow_null=True)


class StatsSerializer(serializers.Serializer):
    """Counts per queue and state, the oldest due job's age, pickup latency percentiles."""

    queues = QueueStatsSerializer(many=True, read_only=True)
    pickup_latency_ms = LatencySerializer(read_only=True)
    at = serializers.DateTimeField(read_only=True)


# --- the fleet: workers and queues -----------------------------------------------------------


class WorkerSerializer(serializers.Serializer):
    """A worker's row (``GET workers/``): ``state`` is ``lost`` once its heartbeat is older
    than the lease."""

    name = serializers.CharField(read_only=True)
    hostname = serializers.CharField(read_only=True)
    pid = serializers.IntegerField(read_only=True)
    engine = serializers.CharField(read_only=True)
    queues = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="Empty: every queue."
    )
    processes = serializers.IntegerField(read_only=True)
    concurrency = serializers.IntegerField(read_only=True)
    started_at = serializers.DateTimeField(read_only=True)
    heartbeat_at = serializers.DateTimeField(read_only=True)
    heartbeat_age_s = serializers.FloatField(read_only=True)
    state = serializers.ChoiceField(choices=[*WorkerState.values, WORKER_LOST], read_only=True)
    jobs_running = serializers.IntegerField(read_only=True)
    jobs_done = serializers.IntegerField(read_only=True)
    running_jobs = serializers.ListField(
        child=serializers.IntegerField(),
        read_only=True,
        help_text="The ids of the jobs it runs (the first 100).",
    )
    version = serializers.CharField(read_only=True)


class QueueSerializer(serializers.Serializer):
    """A queue of an engine (``GET queues/``): paused or not, and its jobs' counts per state."""

    queue = serializers.CharField(read_only=True)
    engine = serializers.CharField(read_only=True)
    paused = serializers.BooleanField(read_only=True)
    reason = serializers.CharField(read_only=True)
    paused_at = serializers.DateTimeField(read_only=True, allow_null=True)
    paused_by = serializers.CharField(read_only=True)
    states = serializers.DictField(child=serializers.IntegerField(), read_only=True)


class PauseSerializer(KnownFieldsOnly):
    """``POST queues/{name}/pause/``."""

    engine = StrictCharField(required=False, default="default", max_length=100)
    reason = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=2000,
        help_text="Why, for the other operators (shown beside the queue).",
    )


class ResumeSerializer(KnownFieldsOnly):
    """``POST queues/{name}/resume/``."""

    engine = StrictCharField(required=False, default="default", max_length=100)


class PausedSerializer(serializers.Serializer):
    """What pause answers: the queue's pause."""

    queue = serializers.CharField(read_only=True)
    engine = serializers.CharField(read_only=True)
    paused = serializers.BooleanField(read_only=True)
    reason = serializers.CharField(read_only=True)
    paused_at = serializers.DateTimeField(read_only=True)
    paused_by = serializers.CharField(read_only=True)


class ResumedSerializer(serializers.Serializer):
    """What resume answers."""

    queue = serializers.CharField(read_only=True)
    engine = serializers.CharField(read_only=True)
    paused = serializers.BooleanField(read_only=True)
    resumed = serializers.BooleanField(read_only=True, help_text="False when it was not paused.")


# --- schedules -----------------------------------------------------------------------------


class IsoDateTimeField(serializers.DateTimeField):
    """Rendered like the job JSON's timestamps: UTC ``isoformat()`` ("+00:00", not "Z")."""

    # DRF renders a None without calling this; a None here still renders as null.
    def to_representation(self, value: Any) -> str | None:  # type: ignore[override]
        if value is None:
            return None
        return value.astimezone(UTC).isoformat()


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d|w)\s*$"},
            {"type": "number", "minimum": 0},
        ],
        "nullable": True,
        "example": "20s",
        "description": 'A duration: written back in its largest whole unit ("20s", "5m").',
    }
)
class ScheduleDurationField(serializers.Field):
    """A schedule's duration (``every``, ``expires``), judged by the schedule service's
    check; read back as text such as ``"20s"`` (``durations.format_duration``)."""

    def __init__(self, check: Callable[[Any], timedelta | None], **kwargs: Any) -> None:
        self.check = check
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> timedelta | None:
        if isinstance(data, bool) or not isinstance(data, str | int | float):
            raise serializers.ValidationError(_duration_help(data))
        return _schedule_check(self.check, data)

    def to_representation(self, value: Any) -> Any:
        return format_duration(value) if isinstance(value, timedelta) else value


class ScheduleSerializer(KnownFieldsOnly, serializers.ModelSerializer):
    """A schedule: by ``cron`` (with ``tz``) or by interval (``every``), exactly one. Each
    field is checked; ``next_run_at`` is computed. ``queue``, ``priority`` and ``expires``
    apply to each fired job (queue and priority: operators only)."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DateTimeField: IsoDateTimeField,
    }

    catch_up = serializers.ChoiceField(choices=list(schedules.CATCH_UP_CHOICES), required=False)
    payload = serializers.JSONField(required=False, allow_null=True, default=None)
    name = StrictCharField(
        max_length=schedules.NAME_LENGTH,
        help_text="Unique among your own schedules (no control characters).",
    )
    kind = StrictCharField(max_length=200, help_text="The kind each occurrence enqueues.")
    cron = StrictCharField(
        max_length=100,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text='5 cron fields, e.g. "0 3 * * *", or 6 with the second last '
        '("* * * * * */20"). Null for an interval schedule.',
    )
    every = ScheduleDurationField(
        schedules.check_every,
        help_text='An interval of at least 1 s ("20s", "5m"): occurrences at its whole '
        "multiples from the Unix epoch, in UTC. Null for a cron schedule.",
    )
    tz = StrictCharField(
        max_length=64,
        required=False,
        help_text='An IANA time zone, e.g. "Europe/Paris". Required with cron; "UTC" by '
        "default with every.",
    )
    queue = StrictCharField(
        max_length=_QUEUE_LENGTH,
        required=False,
        allow_null=True,
        help_text="Operators only. The queue of each fired job; null: the kind's.",
    )
    priority = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=PRIORITY_MIN,
        max_value=PRIORITY_MAX,
        help_text="Operators only. The priority of each fired job; null: the kind's.",
    )
    expires = ScheduleDurationField(
        schedules.check_expires,
        help_text="A fired job not started this long after its occurrence ends cancelled "
        '("expired"); null: never.',
    )

    class Meta:
        model = Schedule
        # What the schedule service edits (owner read-only here: a member's is themselves),
        # then what it reports.
        fields = [
            "id",
            *(name for name in schedules.EDITABLE if name != "owner"),
            "owner",
            "declared",
            "last_fired_at",
            "next_run_at",
            "created_at",
            "paused_reason",
        ]
        read_only_fields = [
            "id",
            "owner",
            "declared",
            "last_fired_at",
            "next_run_at",
            "created_at",
            "paused_reason",
        ]

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["owner"] = owner_field(read_only=True, allow_null=True, source="owner_id")
        return fields

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if data.get("cron") == "":
            data["cron"] = None  # an interval schedule has no cron
        return data

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.partial:
            return attrs  # the service judges the schedule as the change leaves it
        try:
            schedules.check_timing(attrs.get("cron"), attrs.get("every"))
        except InvalidSchedule as exc:
            raise serializers.ValidationError({exc.field or "cron": [exc.message]}) from None
        if attrs.get("every") is None and not attrs.get("tz"):
            raise serializers.ValidationError(
                {"tz": ['A cron schedule needs tz, an IANA zone such as "Europe/Paris".']}
            )
        return attrs

    # Each field is judged by the schedule service's own check (``engine.schedules``), the
    # one the admin's form and ``schedule(...)`` use; here per field, so that every bad field
    # of a body is listed at once.
    def validate_name(self, value: str) -> str:
        return _schedule_check(schedules.check_name, value)

    def validate_cron(self, value: str | None) -> str:
        if value is None or value == "":
            return ""
        return _schedule_check(schedules.check_cron, value)

    def validate_tz(self, value: str) -> str:
        return _schedule_check(schedules.check_tz, value)


def _schedule_check(check: Any, value: Any) -> Any:
    try:
        return check(value)
    except InvalidSchedule as exc:
        raise serializers.ValidationError(exc.message) from None
