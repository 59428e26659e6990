"""The engine's only clock: tests move it with time_machine instead of sleeping.

One testing hook, for tests that drive real worker processes, whose clock time_machine cannot
reach: with the environment variable ``DJANGO_JOBS_TEST_CLOCK`` naming a file, ``now()`` is the
instant written in that file (ISO 8601 with an offset, e.g. ``2026-06-01T12:00:30+00:00``),
read on every call, so a test moves the workers' clock by rewriting the file (``set_file``).
The variable itself is read once, when this module is imported (a worker's environment is set
before it starts; a test that sets it in its own process calls ``read_environment``): looked
up on every call, it cost a no-op job about 2 us of the 9 its run takes (``bench.phases``).
It is off unless that variable is set, and it is refused with ``DEBUG`` off: ``now()`` raises
``ImproperlyConfigured`` and the system check ``django_jobs.E011`` stops ``runjobs`` and every
other command from starting, so a production process cannot run on a file's clock.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

TEST_CLOCK_ENV = "DJANGO_JOBS_TEST_CLOCK"


def now() -> datetime:
    if _file is None:
        return timezone.now()
    return _from_file(_file)


def test_clock_file() -> str | None:
    """The file the clock is read from, or ``None`` (the real clock)."""
    return _file


def read_environment() -> None:
    """Read ``DJANGO_JOBS_TEST_CLOCK`` again (it is read once, at import)."""
    global _file
    _file = os.environ.get(TEST_CLOCK_ENV) or None


_file: str | None = None
read_environment()


def _from_file(path: str) -> datetime:
    if not settings.DEBUG:
        raise ImproperlyConfigured(
            f"{TEST_CLOCK_ENV} is set while DEBUG is off: a clock read from a file is for tests "
            "only. Unset it."
        )
    try:
        value = datetime.fromisoformat(Path(path).read_text().strip())
    except (OSError, ValueError) as exc:
        raise ImproperlyConfigured(
            f"{TEST_CLOCK_ENV}={path!r}: the file must hold an ISO 8601 instant ({exc})."
        ) from exc
    if value.tzinfo is None:
        raise ImproperlyConfigured(f"{TEST_CLOCK_ENV}={path!r}: the instant needs an offset.")
    return value


def set_file(path: str | os.PathLike[str], instant: datetime) -> None:
    """Write ``instant`` (aware) into a test clock file, atomically: no reader sees half of it."""
    if instant.tzinfo is None:
        raise ValueError("set_file needs an aware datetime")
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(instant.isoformat())
    os.replace(partial, target)
