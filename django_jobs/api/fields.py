"""The API's serializer fields: strict request fields, and the fields that describe the job JSON.

Request fields take JSON as it is sent and nothing else (``StrictCharField``: 5 is not "5";
``AwareDateTimeField``: an instant with its UTC offset; durations as "30s" or seconds).
``api_field`` makes the read-only field that describes one field of ``django_jobs.serialize``
in the OpenAPI schema; ``serializers`` builds the response shapes from it.
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

from ..durations import format_duration, parse_duration
from ..engine.rows.admission import MAX_RUN_AHEAD, run_ahead_message
from ..exceptions import InvalidDuration, InvalidSchedule
from ..serialize import JobField, JsonType
from ..states import AttemptOutcome, JobState, StepState

# --- the job JSON's fields ---------------------------------------------------------------------


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


def _counts_field(**options: Any) -> serializers.Field:
    return serializers.DictField(child=serializers.IntegerField(), **options)


class AttemptSerializer(serializers.Serializer):
    """One run of a job in its ``attempt_history`` (``attempt_history.ATTEMPT_KEYS``). A member
    never gets ``worker``, ``pid`` nor ``traceback``."""

    attempt = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="The attempt's number (1 for the first)."
    )
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    ended_at = serializers.DateTimeField(read_only=True, allow_null=True)
    worker = serializers.CharField(
        read_only=True, allow_null=True, required=False, help_text="Operators only."
    )
    pid = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        required=False,
        help_text="Operators only: the process that ran it; null when not known.",
    )
    outcome = serializers.ChoiceField(
        choices=list(AttemptOutcome.values),
        read_only=True,
        help_text="How the run ended.",
    )
    error = serializers.CharField(
        read_only=True, allow_null=True, help_text="The error's first line, or null."
    )
    traceback = serializers.CharField(
        read_only=True,
        allow_null=True,
        required=False,
        help_text="Operators only: the whole error, with its traceback.",
    )


def _attempts_field(**options: Any) -> serializers.Field:
    return serializers.ListField(child=AttemptSerializer(), **options)


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
    JsonType.ATTEMPTS: _attempts_field,
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


# --- request fields ------------------------------------------------------------------------


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
        return schedule_check(self.check, data)

    def to_representation(self, value: Any) -> Any:
        return format_duration(value) if isinstance(value, timedelta) else value


def schedule_check(check: Any, value: Any) -> Any:
    try:
        return check(value)
    except InvalidSchedule as exc:
        raise serializers.ValidationError(exc.message) from None
