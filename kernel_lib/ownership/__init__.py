"""``ownership``: leases, owner epochs and fencing; prefix availability (§11.5.1–11.5.2).

* :mod:`.leases` — the SQLite ownership coordinator (leases with a TTL, monotonic
  ``owner_epoch``), fencing checks, and the availability proof of a surviving prefix.
* :mod:`.wait` — waiting, with a deadline, for another owner's lease to end (``wait_for_lease``).

May import: ``checkpoint``, ``log``, ``core`` and the leaves.
"""

from kernel_lib.ownership.leases import (
    Availability, Lease, LeaseCheck, ManualClock, OwnershipCoordinator, ReplicaView,
    SQLiteOwnershipCoordinator, check_available, check_available_at, require_coordinator_domain,
    take_ownership
)
from kernel_lib.ownership.wait import LeaseWait, wait_for_lease

__all__ = [
    "Availability", "Lease", "LeaseCheck", "ManualClock", "OwnershipCoordinator", "ReplicaView",
    "SQLiteOwnershipCoordinator", "check_available", "check_available_at", "require_coordinator_domain",
    "take_ownership", "LeaseWait", "wait_for_lease"
]
