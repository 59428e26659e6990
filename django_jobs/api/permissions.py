"""Deny by default: every action of the API names its rules, and an action without rules is refused.

A view lists its rules per action in ``action_permissions``; ``JobsAPIMixin.get_permissions``
prepends ``IsSignedIn`` (anonymous -> 401) and answers ``DenyAll`` for an action not listed.
Rows a member may not see are filtered out of the queryset, so they answer 404, never 403.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission

from ..kinds.registry import get
from ..permissions import RETRY_OPERATORS_ONLY, can_retry, is_operator


class DenyAll(BasePermission):
    """The rule of an action that declares none."""

    message = "This action is not open to anyone. Ask an operator."

    def has_permission(self, request: Any, view: Any) -> bool:
        return False


class IsSignedIn(BasePermission):
    """Any signed-in user; anonymous requests are answered 401."""

    message = "Sign in first."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated)


class IsOperator(BasePermission):
    """Operators only (``django_jobs.operate_jobs``, or ``JOBS["IS_OPERATOR"]``)."""

    message = "Only operators may do this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_operator(request.user)


class CanRetryJob(BasePermission):
    """Operators retry any job they see; owners retry their own jobs of member-safe kinds.

    Only operators retry from a step: the view checks ``from_step`` once it has read the body
    (``operations.check_retry``, the same rule).
    """

    message = RETRY_OPERATORS_ONLY

    def has_permission(self, request: Any, view: Any) -> bool:
        return True

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        return can_retry(request.user, obj.owner_id, get(obj.kind))
