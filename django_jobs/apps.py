"""The app config: ``ready()`` wires the system checks, the settings reload, the live
streams' receivers, the ``jobs`` modules of installed apps and the kinds of ``TASKS``
backends."""

from __future__ import annotations

import sys

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "django_jobs"
    label = "django_jobs"
    verbose_name = "Background jobs"  # the admin's breadcrumb: "Background jobs > Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here: these modules need the app registry (models, settings), which is
        # ready only now.
        from django.core.signals import setting_changed
        from django.utils.module_loading import autodiscover_modules

        from .engine.rows.admission import admit
        from .engine.run.inline import run_inline
        from .kinds import doors

        doors.install(admit=admit, run_inline=run_inline)  # first: app code may enqueue below
        from . import checks  # noqa: F401 - registers the system checks
        from .conf import reload_jobs_settings

        setting_changed.connect(reload_jobs_settings, dispatch_uid="django_jobs_settings")
        from .events import install as install_live_events

        install_live_events()  # stored event rows -> Redis, for a fleet's SSE and WebSocket
        from . import canvas  # noqa: F401 - registers the built-in kind django_jobs.flow

        autodiscover_modules("jobs")
        if "django_jobs.celery" in sys.modules:
            # A Celery project's tasks (app.autodiscover_tasks()) and its beat schedule.
            from .celery.app import discover_pending
            from .celery.beat import install as install_beat

            discover_pending()
            install_beat()

        from .tasks import register_task_backends

        register_task_backends()  # the job kinds of TASKS backends that run on this engine
