"""``Celery(...)`` and ``current_app``: the app object a Celery project's ``celery.py`` makes.

``app.task`` is ``shared_task``; ``app.conf`` holds what the project configures
(``beat_schedule``, ``timezone``), read from the Django settings of the namespace
``config_from_object("django.conf:settings", namespace="CELERY")`` names; and
``autodiscover_tasks()`` imports each installed app's ``tasks`` module when Django is ready.
Anything else of Celery's app is refused when used, with the native way.
"""

from __future__ import annotations

from typing import Any

from . import names
from .registration import shared_task


class Settings(dict[str, Any]):
    """``app.conf``: a dict whose keys read as attributes too (``app.conf.beat_schedule``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class NotOffered(NotImplementedError, AttributeError):
    """A Celery app attribute this layer does not offer (``hasattr`` reads it as missing)."""


class Celery:
    """A Celery app: its tasks are kinds, its ``conf`` the project's Celery settings."""

    def __init__(self, main: str | None = None, *args: Any, **kwargs: Any) -> None:
        self.main = main
        self._conf = Settings()
        self._source: tuple[Any, str | None] | None = None
        names.apps.append(self)

    @property
    def conf(self) -> Settings:
        """The settings: those set on it, over those of ``config_from_object`` (read on first
        use, as Celery does: a project's ``celery.py`` runs while Django's settings load)."""
        if self._source is not None:
            source, self._source = self._source, None
            self._load(*source)
        return self._conf

    def task(self, *args: Any, **options: Any) -> Any:
        return shared_task(*args, **options)

    def config_from_object(self, obj: Any, namespace: str | None = None, **kwargs: Any) -> None:
        """Read the settings of ``namespace`` (``CELERY_BEAT_SCHEDULE`` -> ``beat_schedule``)
        from Django's settings (``"django.conf:settings"``) or an object, when first used."""
        self._source = (obj, namespace)

    def _load(self, obj: Any, namespace: str | None) -> None:
        if isinstance(obj, str):
            from django.utils.module_loading import import_string

            module, _, attribute = obj.partition(":")
            obj = import_string(f"{module}.{attribute}") if attribute else import_string(module)
        prefix = f"{namespace}_" if namespace else ""
        for key in dir(obj):
            if key.isupper() and key.startswith(prefix):
                self._conf.setdefault(key[len(prefix) :].lower(), getattr(obj, key))

    def autodiscover_tasks(
        self, packages: Any = None, related_name: str = "tasks", **kw: Any
    ) -> None:
        """Import the ``tasks`` module of each installed app, once Django's apps are ready."""
        from django.apps import apps

        if apps.ready:
            discover(related_name)
        else:
            _pending.add(related_name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotOffered(
            f"Celery app.{name} is not part of django_jobs.celery: tasks are kinds "
            "(manage.py jobs kinds), workers are runjobs (manage.py runjobs), control is "
            "django_jobs.cancel/pause_queue (docs/migrating-from-celery.md)."
        )


_pending: set[str] = set()


def apps_made() -> list[Celery]:
    return list(names.apps)


def discover(related_name: str = "tasks") -> None:
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules(related_name)


def discover_pending() -> None:
    """``JobsConfig.ready()``: the ``autodiscover_tasks()`` asked before Django was ready."""
    while _pending:
        discover(_pending.pop())


current_app = Celery("default")
names.current_app = current_app
names.apps.remove(current_app)  # the default app: no conf of the project's
