"""Prometheus metrics of the queue, in the text exposition format (version 0.0.4).

``metrics_view`` serves operators only: 401 to an anonymous request, 403 to a signed-in user who
is not an operator (``JOBS["IS_OPERATOR"]``, default the ``django_jobs.operate_jobs``
permission). A session works; so does any authentication class of ``REST_FRAMEWORK``
(e.g. HTTP Basic for a scraper), tried when the request carries an ``Authorization`` header.

Every number is read from the job table at scrape time, so any web process can serve it:

* ``django_jobs_jobs{queue,state}`` (gauge): rows per queue and state, every state listed;
* ``django_jobs_oldest_due_age_seconds{queue}`` (gauge): how long the oldest due job (queued or
  waiting with ``run_at`` passed) has waited; 0 when none is due;
* ``django_jobs_processed_total{kind,state}`` (counter): ended jobs per kind and final state
  (succeeded, failed, cancelled), those in the table plus those pruned (``PrunedCount``), so
  retention never lowers it;
* ``django_jobs_pickup_latency_seconds`` (summary): ``started_at - run_at`` over the last
  ``LATENCY_SAMPLE`` started jobs, quantiles 0.5, 0.95 and 0.99, excluding rows whose
  timestamps were derived;

and those alert rules watch (``observability.alerting``): live workers per queue, each
worker's heartbeat age, paused queues, kills at a time limit or with a worker process over the
last hour, and dead letters per queue.
"""

from __future__ import annotations

import math
from typing import Any

from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from rest_framework.exceptions import Throttled

from ..conf import jobs_settings
from ..models import Job, PrunedCount
from ..permissions import is_operator
from ..states import ENDED_STATES, JobState
from ..throttling import credentials_user, retry_after_header
from .alerting import alerting_lines
from .stats import LATENCY_SAMPLE, percentile, queue_stats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUANTILES = (0.5, 0.95, 0.99)
#: Challenges a browser answers with its own sign-in prompt.
PROMPTING_SCHEMES = frozenset({"basic", "digest", "negotiate", "ntlm"})

__all__ = ["CONTENT_TYPE", "metrics_text", "metrics_view"]


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET`` the metrics; operators only."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    try:
        user, challenge = _authenticate(request)
    except Throttled as exc:
        response = HttpResponse(
            f"{exc.detail}\n", status=429, content_type="text/plain; charset=utf-8"
        )
        response["Retry-After"] = retry_after_header(exc)
        return response
    if user is None or not getattr(user, "is_authenticated", False):
        response = HttpResponse(
            "Sign in as an operator to read the job metrics.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = challenge or 'Session realm="api"'
        return response
    if not is_operator(user):
        return HttpResponse(
            "Only operators may read the job metrics (the django_jobs.operate_jobs permission, "
            'or JOBS["IS_OPERATOR"]).\n',
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    response = HttpResponse(metrics_text(), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response


def metrics_text() -> str:
    """The exposition text, read from the job table now."""
    jobs = Job.objects.using(jobs_settings.DATABASE)
    stats = queue_stats()
    lines: list[str] = []

    lines += _header("django_jobs_jobs", "gauge", "Jobs per queue and state.")
    for entry in stats["queues"]:
        for state in JobState.values:
            labels = {"queue": entry["queue"], "state": state}
            lines.append(_sample("django_jobs_jobs", labels, entry["states"].get(state, 0)))

    lines += _header(
        "django_jobs_oldest_due_age_seconds",
        "gauge",
        "Seconds the oldest due job (queued or waiting, run_at passed) of a queue has waited.",
    )
    for entry in stats["queues"]:
        age = entry.get("oldest_due_age_s") or 0.0
        lines.append(_sample("django_jobs_oldest_due_age_seconds", {"queue": entry["queue"]}, age))

    lines += _header(
        "django_jobs_processed_total",
        "counter",
        "Ended jobs per kind and final state: those in the table plus those pruned.",
    )
    processed: dict[tuple[str, str], int] = {}
    ended = jobs.filter(state__in=ENDED_STATES).order_by().values_list("kind", "state")
    for kind, state, n in ended.annotate(n=Count("id")):
        processed[kind, state] = n
    pruned = PrunedCount.objects.using(jobs_settings.DATABASE)
    for kind, state, n in pruned.values_list("kind", "state", "count"):
        processed[kind, state] = processed.get((kind, state), 0) + n
    for (kind, state), n in sorted(processed.items()):
        lines.append(_sample("django_jobs_processed_total", {"kind": kind, "state": state}, n))

    lines += _header(
        "django_jobs_pickup_latency_seconds",
        "summary",
        f"Seconds from due (run_at) to started, over the last {LATENCY_SAMPLE} started jobs.",
    )
    latencies = _latencies(jobs)
    for q in QUANTILES:
        value = percentile(latencies, q)
        lines.append(
            _sample(
                "django_jobs_pickup_latency_seconds",
                {"quantile": _number(q)},
                math.nan if value is None else value,
            )
        )
    lines.append(_sample("django_jobs_pickup_latency_seconds_sum", {}, sum(latencies)))
    lines.append(_sample("django_jobs_pickup_latency_seconds_count", {}, len(latencies)))
    lines += alerting_lines(stats, _header, _sample)
    return "\n".join(lines) + "\n"


# --- helpers ---------------------------------------------------------------------------------


def _authenticate(request: HttpRequest) -> tuple[Any, str | None]:
    """The request's user: the session's, else DRF's authentication classes'; and a challenge."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return user, None
    from rest_framework.request import Request
    from rest_framework.settings import api_settings

    authenticators = [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    drf_request = Request(request, authenticators=authenticators)  # what a challenge may read
    challenge = None
    for authenticator in authenticators:
        challenge = authenticator.authenticate_header(drf_request)
        # Never Basic (nor another scheme a browser prompts for, then caches the answer of):
        # a scraper sends its credentials up front (docs/security.md).
        if challenge and challenge.split(None, 1)[0].lower() not in PROMPTING_SCHEMES:
            break
        challenge = None
    if "HTTP_AUTHORIZATION" not in request.META:
        return user, challenge
    return credentials_user(request), challenge  # Throttled past JOBS["AUTH_FAILURE_RATE"]


def _latencies(jobs: Any) -> list[float]:
    recent = (
        jobs.filter(started_at__isnull=False, run_at__isnull=False, timestamps_derived=False)
        .order_by("-id")
        .values_list("run_at", "started_at")[:LATENCY_SAMPLE]
    )
    return sorted(max((started - run_at).total_seconds(), 0.0) for run_at, started in recent)


def _header(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    if not labels:
        return f"{name} {_number(value)}"
    inner = ",".join(f'{key}="{_escape(str(v))}"' for key, v in labels.items())
    return f"{name}{{{inner}}} {_number(value)}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    return str(value)
