"""Who may do what: the operator test and the kind rules shared by the API, the admin and streams.

An *operator* sees and acts on every job. By default that is a user with the
``django_jobs.operate_jobs`` permission (superusers have every permission); ``JOBS["IS_OPERATOR"]``
replaces the test with a dotted path to ``callable(user) -> bool``. Everyone else signed in is a
*member*: they see their own jobs and submit only kinds declared ``member_safe=True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .conf import jobs_settings

if TYPE_CHECKING:
    from .kinds.handle import JobHandle

OPERATE_PERMISSION = "django_jobs.operate_jobs"


def is_operator(user: Any) -> bool:
    """True when ``user`` may see and act on every job."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    check = jobs_settings.callable_setting("IS_OPERATOR")
    if check is not None:
        return bool(check(user))
    return bool(user.has_perm(OPERATE_PERMISSION))


def can_submit(user: Any, handle: JobHandle | None) -> bool:
    """May ``user`` submit a job of this kind? ``None`` (no such kind) is always refused."""
    if handle is None or not getattr(user, "is_authenticated", False):
        return False
    return handle.member_safe or is_operator(user)


def can_schedule(user: Any, handle: JobHandle | None) -> bool:
    """May ``user`` put this kind on a schedule? Members: member-safe *and* schedulable kinds."""
    if handle is None or not getattr(user, "is_authenticated", False):
        return False
    return (handle.member_safe and handle.schedulable) or is_operator(user)


FROM_STEP_OPERATORS_ONLY = (
    "Only operators may retry from a step: from_step runs completed steps again, and their "
    "effects cannot be undone. Retry without from_step (completed steps are replayed from "
    "storage, not run again), or ask an operator."
)
RETRY_OPERATORS_ONLY = "Only operators may retry jobs of this kind."


def retry_refusal(
    user: Any,
    owner_id: Any,
    handle: JobHandle | None,
    *,
    from_step: str | None = None,
    children: bool = False,
) -> str | None:
    """Why ``user`` may not retry this job (``None``: they may). The one retry rule.

    Operators retry any job, from any step, with its children. An owner retries their own job
    of a member-safe kind, plainly: ``from_step`` re-runs completed steps, whose effects the
    owner cannot undo, and ``children`` re-runs jobs of kinds they may not submit.
    """
    if is_operator(user):
        return None
    if children:
        return CHILDREN_OPERATORS_ONLY
    if handle is None or not handle.member_safe:
        return RETRY_OPERATORS_ONLY
    if owner_id is None or owner_id != getattr(user, "pk", None):
        return RETRY_OPERATORS_ONLY
    if from_step is not None:
        return FROM_STEP_OPERATORS_ONLY
    return None


CHILDREN_OPERATORS_ONLY = (
    "Only operators may retry a job with its children; retry the job itself, or ask an operator."
)


def can_retry(
    user: Any, owner_id: Any, handle: JobHandle | None, *, from_step: str | None = None
) -> bool:
    """May ``user`` retry this job (from ``from_step``)? See ``retry_refusal``."""
    return retry_refusal(user, owner_id, handle, from_step=from_step) is None
