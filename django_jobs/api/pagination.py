"""Pages of ``{count, next, previous, results}``; a malformed ``page`` or ``page_size`` is a 400.

A page is also bounded in bytes: a view naming its large JSON columns (``page_bytes_of``)
gets pages of at most about ``JOBS["MAX_PAGE_BYTES"]``. When the requested page would hold
more, the answer is a smaller page that starts at the same row, and its ``next``/``previous``
links carry the smaller ``page_size`` (chosen so that the page numbers line up), so a client
following the links sees every row exactly once.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Func, IntegerField, Value
from django.db.models.functions import Coalesce
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.utils.urls import replace_query_param

from ..conf import jobs_settings
from .errors import APIError, InvalidRequestError

#: What a row costs besides its large JSON columns (ids, states, timestamps, an error).
ROW_OVERHEAD_BYTES = 1024
#: No table holds this many rows: a page starting further is a 404 before any query (the
#: databases take offsets up to 2**63 - 1 only; past it PostgreSQL and SQLite fail).
MAX_ROWS = 2**53


class PageNotFoundError(APIError):
    status_code = 404
    code = "PAGE_NOT_FOUND"


class JSONBytes(Func):
    """The size in bytes of a JSON column's text (0 for NULL)."""

    output_field = IntegerField()

    def __init__(self, column: str) -> None:
        super().__init__(column)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))")

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="OCTET_LENGTH((%(expressions)s)::text)")


class JobsPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self._check_params(request.query_params)
        self.fitted: tuple[int, int] | None = None  # (page size, page number) within budget
        columns = getattr(view, "page_bytes_of", None)
        if columns:
            self.fitted = self._fit(queryset, request, columns)
        try:
            return super().paginate_queryset(queryset, request, view)
        except NotFound as exc:
            raise PageNotFoundError(
                f"{exc.detail} Start from the first page (leave out page=) and follow the "
                "next and previous links."
            ) from None

    def get_page_size(self, request: Any) -> int | None:
        if getattr(self, "fitted", None):
            return self.fitted[0]  # type: ignore[index]
        return super().get_page_size(request)

    def get_page_number(self, request: Any, paginator: Any) -> Any:
        if getattr(self, "fitted", None):
            return self.fitted[1]  # type: ignore[index]
        return super().get_page_number(request, paginator)

    def get_next_link(self) -> str | None:
        return self._with_fitted_size(super().get_next_link())

    def get_previous_link(self) -> str | None:
        return self._with_fitted_size(super().get_previous_link())

    def _with_fitted_size(self, link: str | None) -> str | None:
        if link is None or not self.fitted:
            return link
        return replace_query_param(link, self.page_size_query_param, self.fitted[0])

    def _fit(self, queryset: Any, request: Any, columns: list[str]) -> tuple[int, int] | None:
        """The page size and number to answer instead of the requested page, when that page
        would exceed the byte budget; ``None`` when it fits (or does not exist)."""
        budget = jobs_settings.MAX_PAGE_BYTES
        size = super().get_page_size(request)
        if not budget or not size:
            return None
        number = request.query_params.get(self.page_query_param) or "1"
        if number in self.last_page_strings:
            count = queryset.count()
            number = str(max(1, -(-count // size)))
        start = (_number(number) - 1) * size
        total: Any = Value(0)
        for column in columns:
            total = total + Coalesce(JSONBytes(column), Value(0))
        rows = list(
            queryset.annotate(_page_bytes=total).values_list("_page_bytes", flat=True)[
                start : start + size
            ]
        )
        costs = [ROW_OVERHEAD_BYTES + (row or 0) for row in rows]
        if sum(costs) <= budget:
            return None
        fits, used = 0, 0
        for cost in costs:
            if used + cost > budget:
                break
            fits, used = fits + 1, used + cost
        fits = max(fits, 1)  # one row, however large (a payload is bounded on its own)
        # The page must start where the requested one did: its size divides the start.
        while start % fits:
            fits -= 1
        return fits, start // fits + 1

    def _check_params(self, params: Any) -> None:
        errors = {}
        page = params.get(self.page_query_param)
        if page is not None and page not in self.last_page_strings and not _whole(page, 1):
            errors[self.page_query_param] = ["Send a page number: 1, 2, 3, ..."]
        size = params.get(self.page_size_query_param)
        if size is not None and not _whole(size, 1, self.max_page_size):
            errors[self.page_size_query_param] = [
                f"Send a whole number from 1 to {self.max_page_size}, or leave it out "
                f"({self.page_size} per page)."
            ]
        if errors:
            raise InvalidRequestError(errors=errors)
        if page is not None and page not in self.last_page_strings:
            per_page = _number(size) if size is not None else self.page_size
            if not _whole(page, 1, MAX_ROWS // per_page):  # beyond any table: no query
                raise PageNotFoundError(
                    "Invalid page. Start from the first page (leave out page=) and follow the "
                    "next and previous links."
                )

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
                parameter["description"] = (
                    f"Results per page (default {self.page_size}). A page holding more than "
                    'JOBS["MAX_PAGE_BYTES"] comes back smaller: follow the next link.'
                )
        return parameters


def _whole(text: str, low: int, high: int | None = None) -> bool:
    """Is ``text`` a whole number from ``low`` to ``high``? Any number of digits is read:
    a long run of zeros first is still a small number."""
    if not text.isascii() or not text.isdigit():
        return False
    digits = text.lstrip("0") or "0"
    if len(digits) > 30:  # past every bound here (and past what int() reads quickly)
        return high is None
    value = int(digits)
    return value >= low and (high is None or value <= high)


def _number(text: str) -> int:
    """A number ``_whole`` accepted with a bound (so of at most 30 digits)."""
    return int(text.lstrip("0") or "0")
