"""drf-spectacular for the API's views, whatever ``REST_FRAMEWORK`` says (SPEC §2).

drf-spectacular's ``@extend_schema`` builds each annotated operation's schema class on top of
``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``, read when the views are defined; a project that
does not name drf-spectacular's there would get DRF's own, and ``GET schema/`` would fail. The
decorators here give it drf-spectacular's ``AutoSchema`` to build on, and the views carry it as
their ``schema``: the API's schema needs no global setting.

``GET schema/?lang=`` names the schema's language. drf-spectacular activates whatever it is
given, and Django keeps a translation object for every language code it activates; with the
built schema kept per language, 500 made-up codes would be 500 schemas in memory. Only the
codes of ``settings.LANGUAGES`` are read (``schema_language``); anything else is the default
language, served from the same built schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.utils import translation
from drf_spectacular import utils
from drf_spectacular.openapi import AutoSchema

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["AutoSchema", "extend_schema", "extend_schema_view", "schema_language"]


def schema_language(asked: str | None) -> str:
    """The language the schema is built in for ``?lang=asked`` (or the request's language,
    ``translation.get_language()``, when none is asked): a code of ``settings.LANGUAGES``
    (compared without case), else the default, ``settings.LANGUAGE_CODE`` as Django supports
    it. So at most one schema per language of ``LANGUAGES`` is ever built."""
    codes = {code.lower(): code for code, _name in settings.LANGUAGES}
    for candidate in (asked, None if asked else translation.get_language()):
        if candidate and candidate.lower() in codes:
            return codes[candidate.lower()]
    try:
        return translation.get_supported_language_variant(settings.LANGUAGE_CODE)
    except LookupError:  # translation.E004 reports it; keep serving
        return settings.LANGUAGE_CODE


def extend_schema(**kwargs: Any) -> Callable[[F], F]:
    """drf-spectacular's ``extend_schema``, on drf-spectacular's ``AutoSchema``."""
    decorate = utils.extend_schema(**kwargs)

    def decorator(function: F) -> F:
        if getattr(function, "schema", None) is None:
            function.schema = AutoSchema  # type: ignore[attr-defined]  # the base it builds on
        return decorate(function)

    return decorator


extend_schema_view = utils.extend_schema_view
