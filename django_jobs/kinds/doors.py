"""The two doors of the engine a kind goes through: admission and the inline run.

A ``JobHandle`` sits below the engine, so it cannot import it: ``enqueue`` calls ``admit``
and ``handle(payload)`` calls ``run_inline`` here, and ``JobsConfig.ready()`` installs the
engine's own functions (``install``) before any app's code can reach them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from ..models import Job

# The handle is typed Any here: ``handle`` imports this module.
Admit = Callable[..., "list[Job]"]
RunInline = Callable[[Any, Any], Any]

_admit: Admit | None = None
_run_inline: RunInline | None = None

NOT_READY = (
    "django_jobs is not ready: add 'django_jobs' to INSTALLED_APPS and let Django load its "
    "apps (django.setup(), or run through manage.py) before enqueueing or running a job."
)


def install(*, admit: Admit, run_inline: RunInline) -> None:
    """Connect the doors to the engine: ``engine.rows.admission.admit`` and
    ``engine.run.inline.run_inline`` (``JobsConfig.ready()``)."""
    global _admit, _run_inline
    _admit, _run_inline = admit, run_inline


def admit(handle: Any, payloads: list[Any], **options: Any) -> list[Job]:
    if _admit is None:
        raise ImproperlyConfigured(NOT_READY)
    return _admit(handle, payloads, **options)


def run_inline(handle: Any, payload: Any) -> Any:
    if _run_inline is None:
        raise ImproperlyConfigured(NOT_READY)
    return _run_inline(handle, payload)
