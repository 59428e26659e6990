"""The engine's only clock: tests move it with time_machine instead of sleeping."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    return timezone.now()
