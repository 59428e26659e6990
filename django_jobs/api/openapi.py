"""drf-spectacular for the API's views, whatever ``REST_FRAMEWORK`` says (SPEC §2).

drf-spectacular's ``@extend_schema`` builds each annotated operation's schema class on top of
``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``, read when the views are defined; a project that
does not name drf-spectacular's there would get DRF's own, and ``GET schema/`` would fail. The
decorators here give it drf-spectacular's ``AutoSchema`` to build on, and the views carry it as
their ``schema``: the API's schema needs no global setting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular import utils
from drf_spectacular.openapi import AutoSchema

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["AutoSchema", "extend_schema", "extend_schema_view"]


def extend_schema(**kwargs: Any) -> Callable[[F], F]:
    """drf-spectacular's ``extend_schema``, on drf-spectacular's ``AutoSchema``."""
    decorate = utils.extend_schema(**kwargs)

    def decorator(function: F) -> F:
        if getattr(function, "schema", None) is None:
            function.schema = AutoSchema  # type: ignore[attr-defined]  # the base it builds on
        return decorate(function)

    return decorator


extend_schema_view = utils.extend_schema_view
