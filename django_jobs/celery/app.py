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
from .task import Task


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


class Signal:
    """``app.on_after_configure`` / ``app.on_after_finalize``: receivers connected as Celery's
    (``@app.on_after_configure.connect`` or ``.connect(receiver)``), sent once each when
    Django is ready, before the beat schedule is declared."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.receivers: list[Any] = []

    def connect(self, receiver: Any = None, **options: Any) -> Any:
        if receiver is None:
            return lambda function: self.connect(function, **options)
        if receiver not in self.receivers:
            self.receivers.append(receiver)
        return receiver

    def disconnect(self, receiver: Any, **options: Any) -> None:
        if receiver in self.receivers:
            self.receivers.remove(receiver)

    def send(self, sender: Any, **named: Any) -> list[tuple[Any, Any]]:
        return [
            (receiver, receiver(sender=sender, signal=self, **named)) for receiver in self.receivers
        ]


#: ``Celery(...)``'s arguments that replace a part of Celery's machinery: no counterpart here.
MACHINERY = ("loader", "amqp", "events", "log", "control", "tasks")


class Celery:
    """A Celery app: its tasks are kinds, its ``conf`` the project's Celery settings."""

    def __init__(
        self,
        main: str | None = None,
        *,
        broker: str | None = None,
        backend: str | None = None,
        include: Any = None,
        task_cls: Any = None,
        config_source: Any = None,
        changes: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        for part in MACHINERY:
            if kwargs.get(part) is not None:
                raise NotImplementedError(
                    f"Celery({main!r}, {part}=...): Celery's {part} has no counterpart here "
                    "(jobs are rows, workers are runjobs); leave it out "
                    "(docs/migrating-from-celery.md)."
                )
        self.main = main
        self._conf = Settings(changes or {})
        for key, value in (("broker_url", broker), ("result_backend", backend)):
            if value is not None:
                self._conf[key] = value
        self._conf.update(
            {k: v for k, v in kwargs.items() if k not in (*MACHINERY, "set_as_current", "fixups")}
        )
        self.include = list(include or ())
        #: The base class of ``app.task`` (``"module:Class"`` or a class), resolved when a
        #: task is made, as Celery's ``task_cls``.
        self.task_cls = task_cls
        self._source: tuple[Any, str | None] | None = None
        if config_source is not None:
            self.config_from_object(config_source)
        self.on_after_configure = Signal("app.on_after_configure")
        self.on_after_finalize = Signal("app.on_after_finalize")
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
        """``@app.task``: ``shared_task`` (whose ``base`` is the app's ``task_cls`` when the
        task names none)."""
        return shared_task(*args, **options)

    @property
    def Task(self) -> type[Any]:  # noqa: N802 - Celery's name
        """``app.Task``: the ``task_cls`` given to ``Celery(...)``, else ``Task``."""
        cls = self.task_cls
        if isinstance(cls, str):
            from django.utils.module_loading import import_string

            cls = import_string(cls.replace(":", "."))
        return cls if cls is not None else Task

    def add_periodic_task(
        self,
        schedule: Any,
        sig: Any,
        args: Any = (),
        kwargs: Any = (),
        name: str | None = None,
        **opts: Any,
    ) -> str:
        """A beat entry, as Celery's: keyed by ``name`` (else the signature's repr), the
        signature's task, arguments and options; declared with the rest of the schedule."""
        sig = sig.clone(args, dict(kwargs or {}))
        key = name or repr(sig)
        entry = {
            "schedule": schedule,
            "task": sig.task.name,
            "args": sig.args,
            "kwargs": sig.kwargs,
            "options": {**sig.options, **opts},
        }
        self.conf.setdefault("beat_schedule", {})[key] = entry
        return key

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
        self, packages: Any = None, related_name: str | None = "tasks", force: bool = False
    ) -> None:
        """Import ``<package>.<related_name>`` of each package (``packages``, a list or a
        callable returning one; the installed apps without it), once Django's apps are ready,
        as Celery's: a package without that module is passed over."""
        from django.apps import apps

        if apps.ready:
            discover(related_name, packages)
        else:
            _pending.append((related_name, packages))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotOffered(
            f"Celery app.{name} is not part of django_jobs.celery: tasks are kinds "
            "(manage.py jobs kinds), workers are runjobs (manage.py runjobs), control is "
            "django_jobs.cancel/pause_queue (docs/migrating-from-celery.md)."
        )


_pending: list[tuple[str | None, Any]] = []


def apps_made() -> list[Celery]:
    return list(names.apps)


def discover(related_name: str | None = "tasks", packages: Any = None) -> None:
    from importlib import import_module
    from importlib.util import find_spec

    from django.apps import apps

    if callable(packages):
        packages = packages()
    if packages is None:
        packages = [config.name for config in apps.get_app_configs()]
    for package in packages:
        module = f"{package}.{related_name}" if related_name else package
        try:
            found = find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            import_module(module)


def discover_pending() -> None:
    """``JobsConfig.ready()``: the ``autodiscover_tasks()`` asked before Django was ready, the
    modules of each app's ``include`` and ``imports`` (as Celery's worker imports them), then
    each app's ``on_after_configure`` and ``on_after_finalize``."""
    from importlib import import_module

    while _pending:
        discover(*_pending.pop(0))
    for app in apps_made():
        conf = app.conf
        for module in (*app.include, *(conf.get("imports") or ()), *(conf.get("include") or ())):
            import_module(module)  # as Celery's worker: imports, include
    for app in apps_made():
        app.on_after_configure.send(sender=app, source=app.conf)
    for app in apps_made():
        app.on_after_finalize.send(sender=app)


current_app = Celery("default")
names.current_app = current_app
names.apps.remove(current_app)  # the default app: no conf of the project's
