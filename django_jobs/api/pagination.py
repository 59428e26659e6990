"""Pages of ``{count, next, previous, results}``; a malformed ``page`` or ``page_size`` is a 400."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination

from .errors import APIError, InvalidRequestError


class PageNotFoundError(APIError):
    status_code = 404
    code = "PAGE_NOT_FOUND"


class JobsPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self._check_params(request.query_params)
        try:
            return super().paginate_queryset(queryset, request, view)
        except NotFound as exc:
            raise PageNotFoundError(
                f"{exc.detail} Start from the first page (leave out page=) and follow the "
                "next and previous links."
            ) from None

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

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
                parameter["description"] = f"Results per page (default {self.page_size})."
        return parameters


def _whole(text: str, low: int, high: int | None = None) -> bool:
    if not text.isascii() or not text.isdigit():
        return False
    value = int(text)
    return value >= low and (high is None or value <= high)
