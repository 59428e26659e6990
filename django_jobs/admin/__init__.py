"""The admin is for operators: the queue at a glance, jobs as read-only rows, and schedules.

Pages (see docs/admin.md):

- **Queue overview** (``admin/django_jobs/job/overview/``): counts per queue and state, the
  oldest due job, pickup latency, throughput over the last minutes, dead letters and stuck jobs.
- **Jobs**: a read-only list (state badges, progress bars, "≈" beside derived timestamps) and
  a read-only job page (payload, result, the steps trace, the log tail) with retry, cancel and
  resolve buttons for operators. Both pages follow live events when the event stream is
  installed (``django_jobs.urls``), else they reload every few seconds.
- **Schedules**: cron and time zone are checked in the form; pause and resume are actions.

Nobody adds a job here (jobs are admitted by code or the API) and no field of a job is edited
here, payload included: operators act through ``django_jobs.operations``, the same calls as the
API and the CLI, never by saving the row. Operators (``django_jobs.operate_jobs`` or
``JOBS["IS_OPERATOR"]``) see and act on everything; a staff user granted Django's *view*
permission on jobs or schedules may look, read-only, and is refused every action.

The package: ``display`` (how values are shown), ``filters`` (the job list's filters), ``jobs``
(the job list and page, the overview: ``JobAdmin``, composed of ``job_columns``, ``overview``,
``job_page``, ``job_actions`` and ``fleet``) and ``schedules``; importing it registers both
pages.
"""

from __future__ import annotations

from .jobs import JobAdmin
from .schedules import ScheduleAdmin

__all__ = ["JobAdmin", "ScheduleAdmin"]
