"""The demo's page: the signed-in user's jobs, updating live from the job event stream.

The page loads ``demo/jobs.json`` once per connection of the SSE stream (``GET
/api/jobs/events/``) and then follows the events; ``demo/submit/`` submits a render. It links
to the admin's queue overview, the operators' view of every queue and job.
"""

from __future__ import annotations

import json
import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_POST

from django_jobs.conf import jobs_settings
from django_jobs.exceptions import InvalidPayload
from django_jobs.models import Job
from django_jobs.permissions import is_operator
from django_jobs.serialize import job_json, view_for
from django_jobs.throttling import retry_after, spend

from .demo.jobs import render as render_job


@login_required
@ensure_csrf_cookie  # the page's submit button sends it
def home(request: HttpRequest) -> HttpResponse:
    # Operators get links to each job's admin page; members a hint of the operator's login.
    return render(request, "testproject/home.html", {"operator": is_operator(request.user)})


@login_required
def jobs_json(request: HttpRequest) -> JsonResponse:
    jobs = Job.objects.filter(owner=request.user).order_by("-id")[:20]
    view = view_for(request.user)  # a member never sees a server traceback
    results = []
    for job in jobs:
        data = job_json(job, view=view, payload=False)
        # The page's Log column: the last line, as GET api/jobs/{id}/ gives the owner its log.
        data["last_log"] = job.log[-1] if job.log else None
        results.append(data)
    return JsonResponse({"results": results})


#: The fields ``demo/submit/`` accepts.
SUBMIT_FIELDS = ("video",)


def bad_request(
    code: str, message: str, errors: dict[str, list[str]] | None = None
) -> JsonResponse:
    """A 400 in the API's shape (``{"code", "message", "errors"?}``, docs/api.md)."""
    body: dict[str, object] = {"code": code, "message": message}
    if errors is not None:
        body["errors"] = errors
    return JsonResponse(body, status=400)


@login_required
@require_POST
def submit(request: HttpRequest) -> JsonResponse:
    """Submit a ``demo.render``: the body is ``{}`` or ``{"video": "name"}``."""
    try:
        body = json.loads(request.body or b"{}")
    except RecursionError:
        return bad_request(
            "MALFORMED_BODY", 'The body is nested too deeply. Send {"video": "name"} or {}.'
        )
    except ValueError as exc:  # not JSON, or not UTF-8
        return bad_request(
            "MALFORMED_BODY",
            f"The body is not valid JSON ({exc}). "
            'Send one JSON object: {"video": "name"} or {}.',
        )
    if not isinstance(body, dict):
        return bad_request(
            "INVALID",
            f"The body is JSON {type(body).__name__}, not an object. "
            'Send one JSON object: {"video": "name"} or {}.',
        )
    unknown = sorted(set(body) - set(SUBMIT_FIELDS))
    if unknown:
        accepted = ", ".join(SUBMIT_FIELDS)
        return bad_request(
            "INVALID",
            "The request is invalid: fix the fields listed in errors and send it again.",
            {name: [f"Unknown field: this request accepts only {accepted}."] for name in unknown},
        )
    video = body.get("video") or f"clip-{uuid.uuid4().hex[:6]}"
    if not isinstance(video, str):
        return bad_request(
            "INVALID",
            "The request is invalid: fix the fields listed in errors and send it again.",
            {"video": ['A name is text, such as "intro".']},
        )
    # The page's button adds work like the API's submit: it spends the same member's budget.
    rate = jobs_settings.MEMBER_RATE
    if rate and not is_operator(request.user):
        wait = spend(f"member:{request.user.pk}", rate)
        if wait is not None:
            refused = JsonResponse(
                {
                    "code": "THROTTLED",
                    "message": f'Too many submits: members may make {rate} (JOBS["MEMBER_RATE"]).'
                    " Send it again later.",
                },
                status=429,
            )
            refused["Retry-After"] = str(retry_after(wait))
            return refused
    try:
        job = render_job.as_user(request.user, {"video": video, "frames": 20})
    except InvalidPayload as exc:
        return bad_request("INVALID_PAYLOAD", exc.message)
    view = view_for(request.user)
    return JsonResponse(job_json(job, view=view, deduped=job.deduped), status=201)
