"""``Store``: the SQL seam, made of one mixin per concern (as Django's ``BaseDatabaseWrapper``
is of its operations, features and introspection). Its methods are the mixins'; a dialect's
store class overrides the statements that differ."""

from __future__ import annotations

from .admission import AdmissionMixin
from .children import ChildrenMixin
from .claims import ClaimsMixin
from .core import StoreCore
from .events import EventRowsMixin
from .leases import LeasesMixin
from .maintenance import MaintenanceMixin
from .notifications import NotificationsMixin
from .operators import OperatorsMixin
from .outcomes import OutcomesMixin
from .schedules import SchedulesMixin
from .steps import StepsMixin


class Store(
    AdmissionMixin,
    ClaimsMixin,
    LeasesMixin,
    OutcomesMixin,
    MaintenanceMixin,
    ChildrenMixin,
    StepsMixin,
    SchedulesMixin,
    OperatorsMixin,
    EventRowsMixin,
    NotificationsMixin,
    StoreCore,
):
    """The SQL seam. One instance per database alias; cheap to build.

    What differs between databases is a capability flag (``StoreFeatures``, as Django's
    ``connection.features``), set by each store class: callers ask the flag, never the vendor.
    """
