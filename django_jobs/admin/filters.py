"""The job list's filters: declared queues, kinds and engines, expired leases, and the search
box's refusals."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import clock
from ..conf import jobs_settings
from ..kinds.registry import all_handles
from ..models import Job
from ..search import InvalidFilter
from ..states import JobState


class _DeclaredValuesFilter(admin.SimpleListFilter):
    """Filter on values the code declares (no ``SELECT DISTINCT`` over the whole table)."""

    field = ""

    def declared(self) -> set[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = self.value()
        values = self.declared() | ({chosen} if chosen else set())
        return [(v, v) for v in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(**{self.field: self.value()}) if self.value() else queryset


class QueueFilter(_DeclaredValuesFilter):
    title = parameter_name = field = "queue"

    def declared(self) -> set[str]:
        caps = (jobs_settings.CAPS or {}).get("queues") or {}
        return {h.queue for h in all_handles()} | set(caps) | set(jobs_settings.RATES or {})


#: Kinds that django_jobs registers itself: listed only once jobs of theirs exist (a project
#: that never chains jobs does not see ``django_jobs.flow``).
BUILT_IN_KINDS = frozenset({"django_jobs.flow"})


class KindFilter(_DeclaredValuesFilter):
    title = parameter_name = field = "kind"

    def declared(self) -> set[str]:
        kinds = {h.kind for h in all_handles()}
        jobs = Job.objects.using(jobs_settings.DATABASE)
        return {
            kind
            for kind in kinds
            if kind not in BUILT_IN_KINDS or jobs.filter(kind=kind).exists()  # kind_state index
        }


class EngineFilter(_DeclaredValuesFilter):
    title = parameter_name = field = "engine"

    def declared(self) -> set[str]:
        return set(jobs_settings.engine_names()) | {h.engine for h in all_handles()}


class LeaseFilter(admin.SimpleListFilter):
    """Running jobs whose worker stopped heartbeating (their lease ran out)."""

    title = "lease"
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("expired", "Expired (stuck running)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() == "expired":
            return queryset.filter(state=JobState.RUNNING, leased_until__lt=clock.now())
        return queryset


#: Set on a request whose search the job list refused: the page answers 400.
BAD_SEARCH = "_djj_bad_search"


def bad_search(request: HttpRequest, error: InvalidFilter) -> None:
    """Say on the page what is wrong with the search, naming each bad word; the list is empty
    and the page answers 400 (``searched_badly``)."""
    for name, text in error.errors.items():
        messages.error(request, f"Search: {name}: {text}")
    setattr(request, BAD_SEARCH, True)


def searched_badly(request: HttpRequest) -> bool:
    return bool(getattr(request, BAD_SEARCH, False))
