"""The job tables. All writes on the hot path go through ``django_jobs.store``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models.base import ModelState
from django.db.models.functions import Coalesce
from django.db.models.signals import post_init, pre_init

from .durations import format_duration
from .states import CLAIMABLE_STATES, LIVE_STATES, JobState, StepState, WorkerState
from .validation import ReadableJSONDecoder


class Job(models.Model):
    """One unit of work: a row that survives restarts."""

    kind = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
    engine = models.CharField(max_length=100, default="default")
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    payload = models.JSONField(null=True, blank=True, decoder=ReadableJSONDecoder)
    result = models.JSONField(null=True, blank=True, decoder=ReadableJSONDecoder)
    error = models.TextField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        # django_jobs_owner_idx serves lookups by owner; a second index would be written on
        # every insert and state change for nothing.
        db_index=False,
    )
    tenant = models.CharField(max_length=200, null=True, blank=True)
    priority = models.SmallIntegerField(default=0)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=1)
    progress = models.JSONField(null=True, blank=True, decoder=ReadableJSONDecoder)
    log = models.JSONField(default=list, blank=True, decoder=ReadableJSONDecoder)
    wait_reason = models.TextField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=400, null=True, blank=True)
    version = models.CharField(max_length=100, blank=True, default="")
    captured = models.JSONField(null=True, blank=True, decoder=ReadableJSONDecoder)
    cancel_requested = models.BooleanField(default=False)
    # Set by emit() for a running job whose pending wait it matches: if that job parks itself
    # in "waiting" right after, it is re-asked at once instead of sleeping through the event.
    wake_requested = models.BooleanField(default=False)
    worker_id = models.CharField(max_length=200, null=True, blank=True)
    leased_until = models.DateTimeField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    #: The start of its first attempt (``started_at`` is the last start: a retry's, a resume's).
    first_started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    timestamps_derived = models.BooleanField(default=False)
    # The job whose ``ctx.step.spawn`` started this one (None: a top-level job). SET_NULL: a
    # pruned parent leaves its children readable (and their end then wakes nobody).
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        # django_jobs_parent_idx (partial) serves "the children of"; top-level rows cost nothing.
        db_index=False,
    )
    # Children spawned and not yet ended: each child's end decrements it in the transaction
    # that records that end, and the one that brings it to zero wakes this job (O(1) per end).
    # db_default too: a row written by SQL that predates these columns (an import, a worker
    # of the previous release during a rolling deploy) gets 0, not a NOT NULL error.
    children_pending = models.IntegerField(default=0, db_default=0)
    # Children ever counted for this job: 0 means "not a parent", so job JSON reads no counts.
    children_total = models.IntegerField(default=0, db_default=0)
    # ``expires=``: a job not started by then is never run; it ends ``cancelled`` with the
    # error "expired" (the claim passes over it, maintenance ends it). None: never expires.
    expires_at = models.DateTimeField(null=True, blank=True)
    # The enqueuing caller's W3C trace context (``traceparent``, ``tracestate``; never baggage),
    # written by the insert itself when a span was active (docs/observability.md), and the
    # context of the job's last attempt (``previous``) that a retry links to. None: untraced.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    # Every run of the job, oldest first: ``{attempt, started_at, ended_at, worker, pid,
    # outcome, error}``, appended by the statement that records the run's outcome (SPEC §18).
    attempt_history = models.JSONField(
        default=list,
        db_default=models.Value([], output_field=models.JSONField()),
        blank=True,
        editable=False,
        decoder=ReadableJSONDecoder,
    )

    class Meta:
        ordering = ["-id"]
        permissions = [("operate_jobs", "Can operate every job (see, submit, retry, cancel)")]
        indexes = [
            # The claim: "the next due job of this engine", in claim order. Partial, so the
            # millions of ended rows never enter it.
            models.Index(
                fields=["engine", "priority", "run_at", "id"],
                name="django_jobs_claim_idx",
                condition=models.Q(state__in=CLAIMABLE_STATES),
            ),
            # Lease rescue: running rows whose worker stopped heartbeating.
            models.Index(
                fields=["engine", "leased_until"],
                name="django_jobs_lease_idx",
                condition=models.Q(state=JobState.RUNNING),
            ),
            models.Index(fields=["state", "queue"], name="django_jobs_state_queue_idx"),
            models.Index(fields=["kind", "state"], name="django_jobs_kind_state_idx"),
            # Partial: a job without an owner, or not yet ended, costs these indexes nothing
            # (an index entry is written on every insert and every state change).
            models.Index(
                fields=["owner", "-id"],
                name="django_jobs_owner_idx",
                condition=models.Q(owner__isnull=False),
            ),
            models.Index(
                fields=["parent", "id"],
                name="django_jobs_parent_idx",
                condition=models.Q(parent__isnull=False),
            ),
            models.Index(
                fields=["ended_at"],
                name="django_jobs_ended_idx",
                condition=models.Q(ended_at__isnull=False),
            ),
            # Expiry: queued jobs that carry an ``expires_at``; a job without one costs it
            # nothing (the claim's own filter reads the column on the rows it picks).
            models.Index(
                fields=["expires_at"],
                name="django_jobs_expiry_idx",
                condition=models.Q(state=JobState.QUEUED, expires_at__isnull=False),
            ),
        ]
        constraints = [
            # One live job per (kind, owner, key): the idempotency guarantee. A job without a
            # key gets no entry: keys that are NULL never conflict in a unique index anyway.
            # The key in the condition also keeps the claim off this index: a claim, which
            # names no key, cannot imply it. Without it, a claim planned while the
            # statistics counted no live job chose a full scan of this index and a sort over
            # the claim index (tests/store/test_hot_path_shape.py), a plan that reads every
            # live job on each claim once the queue fills.
            models.UniqueConstraint(
                models.F("kind"),
                Coalesce(models.F("owner"), models.Value(0)),
                models.F("idempotency_key"),
                name="django_jobs_live_key_uniq",
                condition=models.Q(state__in=LIVE_STATES, idempotency_key__isnull=False),
            ),
        ]

    deduped: bool = False

    def __str__(self) -> str:
        return f"{self.kind}#{self.pk} ({self.state})"

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any, **kwargs: Any) -> Job:
        # **kwargs: Django 6.1 passes fetch_mode=, Django 5.2 passes nothing more.
        instance = super().from_db(db, field_names, values, **kwargs)
        instance.normalize_timestamps()
        return instance

    @classmethod
    def built(cls, db: str, rows: list[dict[str, Any]]) -> list[Job]:
        """Jobs from every column's value (in field order), as ``from_db`` would build them,
        without ``Model.__init__`` (a third of an ``enqueue_many``'s time) when nothing
        listens to ``pre_init``/``post_init`` of jobs. Unlike ``from_db`` it leaves the
        timestamps as given (``normalize_timestamps`` fills in missing ones)."""
        if pre_init.has_listeners(cls) or post_init.has_listeners(cls):
            return [cls.from_db(db, list(values), list(values.values())) for values in rows]
        jobs = []
        for values in rows:
            job = cls.__new__(cls)
            job.__dict__.update(values)
            state = job._state = ModelState()
            state.adding = False
            state.db = db
            jobs.append(job)
        return jobs

    def normalize_timestamps(self) -> None:
        """Fill in timestamps the state implies but the row lacks (imported or old rows)."""
        fields = self.__dict__
        if not {"state", "created_at", "run_at", "started_at", "ended_at"} <= fields.keys():
            return
        derived = False
        known = [t for t in (self.created_at, self.run_at, self.started_at, self.ended_at) if t]
        earliest: datetime | None = min(known) if known else None
        latest: datetime | None = max(known) if known else None
        if self.created_at is None and earliest is not None:
            self.created_at, derived = earliest, True
        # A waiting job without run_at is legitimately "until woken": leave it.
        if self.run_at is None and self.created_at is not None and self.state != JobState.WAITING:
            self.run_at, derived = self.created_at, True
        ran = self.state in (JobState.RUNNING, JobState.SUCCEEDED) or (
            self.state in (JobState.FAILED, JobState.BLOCKED, JobState.UNKNOWN)
            and self.attempts > 0
        )
        if ran and self.started_at is None and self.run_at is not None:
            self.started_at, derived = self.run_at, True
        if (
            self.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
            and self.ended_at is None
        ):
            if latest is not None:
                self.ended_at, derived = latest, True
        if derived:
            self.timestamps_derived = True

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES


class JobStep(models.Model):
    """One durable step of a job: its saved result is replayed on retry."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=200)
    seq = models.IntegerField(default=0)
    key = models.CharField(max_length=300, blank=True, default="")
    state = models.CharField(max_length=16, choices=StepState.choices, default=StepState.RUNNING)
    value = models.JSONField(null=True, blank=True, decoder=ReadableJSONDecoder)
    error = models.TextField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "seq", "id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="django_jobs_step_name_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}:{self.name} ({self.state})"

    @classmethod
    def stored(cls, db: str, step_id: int, row: Any) -> JobStep:
        """The step just inserted from ``row`` (a ``store.base.StepRow``) with id ``step_id``,
        as a read would return it, without ``Model.__init__`` (which took a third of a plain
        step's Python time, docs/performance.md) when nothing listens to its init signals."""
        values = {
            "id": step_id,
            "job_id": row.job_id,
            "name": row.name,
            "seq": row.seq,
            "key": row.key,
            "state": row.state,
            "value": row.value,
            "error": row.error,
            "attempts": 1,
            "started_at": row.started_at,
            "ended_at": row.ended_at,
        }
        if pre_init.has_listeners(cls) or post_init.has_listeners(cls):
            return cls.from_db(db, list(values), list(values.values()))
        step = cls.__new__(cls)
        step.__dict__.update(values)
        state = step._state = ModelState()
        state.adding, state.db = False, db
        return step


class Schedule(models.Model):
    """A cron or interval schedule; declared ones are synced at worker start, others are added
    at run time. Exactly one of ``cron`` and ``every`` says when it fires: an interval schedule
    has ``cron == ""`` and ``every`` set (whole multiples of it from the Unix epoch, in UTC)."""

    name = models.CharField(max_length=200)
    cron = models.CharField(max_length=100, blank=True, default="")
    every = models.DurationField(null=True, blank=True)
    tz = models.CharField(max_length=64)
    kind = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True, decoder=ReadableJSONDecoder)
    catch_up = models.CharField(max_length=16, default="skip")
    enabled = models.BooleanField(default=True)
    declared = models.BooleanField(default=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    synced_at = models.DateTimeField(null=True, blank=True)
    # Occurrences up to this instant have been handled (fired or deliberately skipped).
    checked_until = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Why the scheduler paused it (its owner may no longer submit the kind, ...); cleared when
    # it is enabled again.
    paused_reason = models.TextField(null=True, blank=True)
    # Enqueue options applied to each fired job (None: the kind's own; no expiry).
    queue = models.CharField(max_length=100, null=True, blank=True)
    priority = models.SmallIntegerField(null=True, blank=True)
    # Counted from each occurrence: a fired job not started that long after it is never run.
    expires = models.DurationField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            # Names are unique per owner, so a member cannot learn another's names from a
            # refusal; ownerless schedules (the declared ones) are unique among themselves.
            models.UniqueConstraint(
                fields=["owner", "name"], name="django_jobs_schedule_owner_name_uniq"
            ),
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(owner__isnull=True),
                name="django_jobs_schedule_name_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.timing} {self.tz})"

    @property
    def timing(self) -> str:
        """When it fires, in words: its cron, or ``every 20s``."""
        if self.every is not None:
            return f"every {format_duration(self.every)}"
        return self.cron


class Event(models.Model):
    """An emitted event: admits ``@job(on=name)`` handlers and resolves ``wait_for_event``."""

    name = models.CharField(max_length=200)
    data = models.JSONField(null=True, blank=True, decoder=ReadableJSONDecoder)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    tenant = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["name", "id"], name="django_jobs_event_name_idx")]

    def __str__(self) -> str:
        return f"{self.name}#{self.pk}"


class JobEventRecord(models.Model):
    """One live event about a job, as sent over SSE and the WebSocket (``django_jobs.events``).

    The rows carry events from the process that made them (a worker) to every web process, and
    they are the durable tail a client replays with ``Last-Event-ID``: the row's id is the
    event's id. ``owner`` is the job owner's primary key as text (``None``: operators only).
    Not a foreign key to ``Job``: pruning jobs stays a plain delete, and events are pruned on
    their own, after ``JOBS["EVENT_RETENTION"]``.
    """

    type = models.CharField(max_length=32)
    job_id = models.BigIntegerField()
    owner = models.CharField(max_length=64, null=True, blank=True)
    data = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        # An index entry is written for every event: a member's replay reads by owner (events
        # of ownerless jobs reach operators only, who read by id), and pruning bisects on id.
        indexes = [
            models.Index(
                fields=["owner", "id"],
                name="django_jobs_jobevent_owner_idx",
                condition=models.Q(owner__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.job_id} (event {self.pk})"


class PrunedCount(models.Model):
    """How many ended jobs of a kind and final state retention has deleted, in all.

    ``django_jobs_processed_total`` adds it to the ended rows still in the table, so the
    counter never goes down when old jobs are pruned. Written in the pruning transaction.
    """

    kind = models.CharField(max_length=200)
    state = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "state"], name="django_jobs_pruned_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.state}: {self.count} pruned"


class Throttle(models.Model):
    """One throttle's state (``django_jobs.api.throttles``): the moment its budget is whole again.

    A generic cell rate algorithm: each admitted request moves ``until`` on by one interval
    (the window divided by the count); a request is refused while ``until`` lies more than
    the window minus one interval ahead. One row per member (submits and schedule creations)
    and per client address with refused credentials; a row whose ``until`` has passed means
    nothing and is deleted when a new row is added.
    """

    key = models.CharField(max_length=200, primary_key=True)
    until = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key} until {self.until:%Y-%m-%d %H:%M:%S}"


def worker_name(worker_id: str | None) -> str | None:
    """The name of the worker that holds a job, from the job's ``worker_id``
    (``NAME:ENGINE:TOKEN``, see ``engine.worker.make_worker_id``): the id without its last two
    parts. ``None`` for ``None``."""
    if not worker_id:
        return None
    return worker_id.rsplit(":", 2)[0]


def worker_pid(worker_id: str | None) -> int | None:
    """The id of the process that holds a job, from the job's ``worker_id``: its ``TOKEN`` is
    ``HEX.PID`` (``engine.worker.make_worker_id``), so the claim that writes the id writes the
    process too, at no cost. ``None`` for ``None`` and for an id without one (written by an
    older release)."""
    if not worker_id:
        return None
    _, _, pid = worker_id.rpartition(":")[2].partition(".")
    return int(pid) if pid.isdigit() else None


class Worker(models.Model):
    """One running worker process (``runjobs``): written at its start, at each heartbeat and
    as it stops (``django_jobs.engine.rows.fleet``). Stopped rows are pruned after a day."""

    name = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    engine = models.CharField(max_length=100, default="default")
    # The queues it claims from; an empty list: every queue of its engine.
    queues = models.JSONField(default=list, blank=True)
    processes = models.IntegerField(default=1)
    concurrency = models.IntegerField(default=1)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    state = models.CharField(
        max_length=16, choices=WorkerState.choices, default=WorkerState.RUNNING
    )
    jobs_running = models.IntegerField(default=0)
    jobs_done = models.BigIntegerField(default=0)
    version = models.CharField(max_length=50, blank=True, default="")
    # Its job processes (SPEC §15): per child ``{slot, pid, generation, started_at, rss_bytes,
    # jobs_done, restarts, jobs}`` (``engine.rows.fleet.process_entry``), written at each
    # heartbeat.
    processes_detail = models.JSONField(
        default=list, db_default=models.Value([], output_field=models.JSONField()), blank=True
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class PausedQueue(models.Model):
    """A queue whose jobs no worker starts (``django_jobs.pause_queue``); deleting the row
    resumes it. Enqueueing still works; jobs already running finish."""

    engine = models.CharField(max_length=100, default="default")
    queue = models.CharField(max_length=100)
    reason = models.TextField(blank=True, default="")
    paused_at = models.DateTimeField()
    paused_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["engine", "queue"]
        constraints = [
            models.UniqueConstraint(fields=["engine", "queue"], name="django_jobs_paused_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.engine}/{self.queue} paused"


class JobRollup(models.Model):
    """The jobs of one minute (``span`` 60), quarter hour (900) or hour (3600), one engine,
    queue and kind, counted for the charts (SPEC §18): written by a worker's ``Rollups`` duty
    once the span is over, from the jobs that ended in it; never per job. The queue's own row (kind
    ``""``) holds its depth and oldest queued job's age, sampled as the minute closed. Deleted
    with the jobs, by the retention."""

    minute = models.DateTimeField()  # the span's start
    span = models.IntegerField(default=60)  # seconds: 60, 900 or 3600
    engine = models.CharField(max_length=100, default="default")
    queue = models.CharField(max_length=100)
    kind = models.CharField(max_length=200, blank=True, default="")
    succeeded = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)  # dead letters: failed for good
    cancelled = models.IntegerField(default=0)
    timeouts = models.IntegerField(default=0)  # failed at a time limit (JOB_TIMEOUT)
    lost = models.IntegerField(default=0)  # failed with their worker process (WORKER_LOST)
    # ``django_jobs.histograms``: ``{"bucket": count}`` of runtimes (ended_at - started_at) and
    # of first attempts' pickup latency (started_at - run_at), in milliseconds.
    runtime = models.JSONField(default=dict, blank=True)
    pickup = models.JSONField(default=dict, blank=True)
    depth = models.IntegerField(null=True, blank=True)  # queued jobs (the queue's row)
    oldest_age_s = models.FloatField(null=True, blank=True)  # its oldest due queued job's wait

    class Meta:
        constraints = [
            # One row per span: a second worker closing the same minute inserts nothing, and
            # the charts read a window along this index.
            models.UniqueConstraint(
                fields=["span", "minute", "engine", "queue", "kind"],
                name="django_jobs_rollup_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.engine}/{self.queue}/{self.kind or '*'} @ {self.minute:%Y-%m-%d %H:%M}"


class RollupMark(models.Model):
    """How far the rollups of an engine are closed: the worker that moves it (a conditional
    update) closes the minutes between, so two workers never count the same minute."""

    engine = models.CharField(max_length=100, unique=True)
    closed_until = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.engine}: {self.closed_until:%Y-%m-%d %H:%M}"
