"""Request and response shapes of the API.

Requests are validated by these serializers. Responses are built by ``django_jobs.serialize``
(one job JSON shared by the API, the admin, the CLI and the events); the response serializers
here describe that JSON for the OpenAPI schema, and the tests hold the two together. Their
fields (strict request fields, the job JSON's fields) are in ``fields``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from rest_framework import serializers

from .. import clock
from ..engine import schedules
from ..engine.rows.admission import MAX_RUN_AHEAD, MAX_RUN_AHEAD_WORDS, run_ahead_message
from ..exceptions import InvalidSchedule
from ..models import Job, Schedule
from ..serialize import BODY_FIELDS, JOB_FIELDS, STEP_FIELDS, JobField
from ..states import WORKER_LOST, WorkerState
from ..validation import key_problem
from .fields import (
    AwareDateTimeField,
    DurationInputField,
    IsoDateTimeField,
    ScheduleDurationField,
    StrictBooleanField,
    StrictCharField,
    api_field,
    owner_field,
    schedule_check,
)

PRIORITY_MIN, PRIORITY_MAX = -32768, 32767  # Job.priority is a SmallIntegerField
_KEY_LENGTH = Job._meta.get_field("idempotency_key").max_length
_KIND_LENGTH = Job._meta.get_field("kind").max_length
_QUEUE_LENGTH = Job._meta.get_field("queue").max_length


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


class ChartsSerializer(serializers.Serializer):
    """The charts' series over a window (``GET charts/``): one value per bucket, oldest first."""

    window = serializers.ChoiceField(choices=["1h", "24h", "7d"], read_only=True)
    bucket_s = serializers.IntegerField(read_only=True, help_text="Seconds per bucket.")
    queue = serializers.CharField(read_only=True, allow_null=True)
    kind = serializers.CharField(read_only=True, allow_null=True)
    buckets = serializers.ListField(
        child=serializers.DateTimeField(), read_only=True, help_text="Each bucket's start."
    )
    jobs = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        read_only=True,
        help_text="succeeded and failed: jobs ended per bucket.",
    )
    runtime_ms = serializers.JSONField(
        read_only=True, help_text="Per kind: p50 and p95 runtime per bucket (null: no job)."
    )
    pickup_ms = serializers.JSONField(
        read_only=True, help_text="p50 and p95 of first attempts' run_at to start, per bucket."
    )
    queues = serializers.JSONField(
        read_only=True, help_text="Per queue: depth and oldest_age_s (seconds) per bucket."
    )
    choices = serializers.JSONField(
        read_only=True, help_text="The queues and kinds the window has rows of."
    )
    at = serializers.DateTimeField(read_only=True)


# --- the fleet: workers and queues -----------------------------------------------------------


class WorkerProcessSerializer(serializers.Serializer):
    """One process of a worker (``processes_detail``): a worker process of ``runjobs
    --processes N``, or the worker's own process with ``--processes 0``."""

    slot = serializers.IntegerField(read_only=True, help_text="0 to processes - 1.")
    pid = serializers.IntegerField(read_only=True)
    generation = serializers.IntegerField(
        read_only=True, help_text="One more at each SIGHUP or --reload."
    )
    started_at = serializers.DateTimeField(read_only=True)
    rss_bytes = serializers.IntegerField(
        read_only=True, help_text="Resident memory at its last heartbeat (0 before the first)."
    )
    jobs_done = serializers.IntegerField(read_only=True)
    restarts = serializers.IntegerField(
        read_only=True, help_text="Processes of this slot that died and were started again."
    )
    jobs = serializers.ListField(
        child=serializers.IntegerField(),
        read_only=True,
        help_text="The ids of the jobs it runs now (the first 100).",
    )


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
    processes_detail = WorkerProcessSerializer(
        many=True,
        read_only=True,
        help_text="The processes that run its jobs, as of its last heartbeat; empty once stopped.",
    )


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
        return schedule_check(schedules.check_name, value)

    def validate_cron(self, value: str | None) -> str:
        if value is None or value == "":
            return ""
        return schedule_check(schedules.check_cron, value)

    def validate_tz(self, value: str) -> str:
        return schedule_check(schedules.check_tz, value)
