"""The no-op task of the django_tasks_db peer."""

from __future__ import annotations

from django.tasks import task


@task()
def noop(n: int) -> None:
    return None
