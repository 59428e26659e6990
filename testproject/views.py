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

from django_jobs.models import Job
from django_jobs.permissions import is_operator
from django_jobs.serialize import job_json, view_for

from .jobs import render as render_job


@login_required
@ensure_csrf_cookie  # the page's submit button sends it
def home(request: HttpRequest) -> HttpResponse:
    # Operators get links to each job's admin page; members a hint of the operator's login.
    return render(request, "testproject/home.html", {"operator": is_operator(request.user)})


@login_required
def jobs_json(request: HttpRequest) -> JsonResponse:
    jobs = Job.objects.filter(owner=request.user).order_by("-id")[:20]
    view = view_for(request.user)  # a member never sees a server traceback
    return JsonResponse({"results": [job_json(j, view=view, payload=False) for j in jobs]})


@login_required
@require_POST
def submit(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body or b"{}")
    video = str(body.get("video") or f"clip-{uuid.uuid4().hex[:6]}")
    job = render_job.as_user(request.user, {"video": video, "frames": 20})
    view = view_for(request.user)
    return JsonResponse(job_json(job, view=view, deduped=job.deduped), status=201)
