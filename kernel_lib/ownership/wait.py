"""Waiting for a lease to end, with a deadline (§11.5.1).

A replacement may not act on a trajectory while another owner's lease is live. When that owner
has died (or stalled) without releasing it, the replacement waits until the coordinator lets the
lease expire and then gets a new grant under a newer ``owner_epoch``. :func:`wait_for_lease` does
that wait: it asks again whenever the coordinator refuses with
:class:`~kernel_lib.errors.LeaseHeldError`, never past ``timeout_s``, and says how long it waited
and whom it found holding the lease. It works with any
:class:`~kernel_lib.ownership.leases.OwnershipCoordinator` (the SQLite one here, the etcd one in
:mod:`kernel_lib.quorum.coordinator`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from kernel_lib.errors import ConfigError, LeaseHeldError, LeaseWaitTimeoutError
from kernel_lib.log.base import LogStore
from kernel_lib.ownership.leases import Lease, OwnershipCoordinator, take_ownership

__all__ = ["MAX_LEASE_WAIT_S", "LeaseWait", "wait_for_lease"]

#: The longest wait accepted, so that a typo cannot block a notebook or a worker for hours.
MAX_LEASE_WAIT_S = 3600.0


@dataclass(frozen=True)
class LeaseWait:
    """What :func:`wait_for_lease` got.

    Fields:
        lease: the new grant (its ``owner_epoch`` is newer than every earlier grant).
        waited_s: seconds from the first request to the grant, on the caller's monotonic clock.
        attempts: requests made (1 when the trajectory was free at once).
        held_by: the ``(owner_id, owner_epoch)`` grants that refused it, in the order first seen.
    """

    lease: Lease
    waited_s: float
    attempts: int
    held_by: tuple[tuple[str, int], ...] = ()

    def to_dict(self) -> dict:
        return {"lease": self.lease.to_dict(), "waited_s": self.waited_s, "attempts": self.attempts,
                "held_by": [list(h) for h in self.held_by]}


def _seconds(name: str, value: object, *, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value > high or value < low or (low_open and value == low):
        bound = f"{'more than' if low_open else 'at least'} {low:g} and at most {high:g}"
        raise ConfigError(f"{name} must be a number of seconds, {bound}, got {value!r}")
    return float(value)


def wait_for_lease(coordinator: OwnershipCoordinator, trajectory_id: str, owner_id: str, ttl_s: float, *,
                   timeout_s: float = 30.0, interval_s: float = 0.1, store: LogStore | None = None,
                   clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> LeaseWait:
    """Acquire ``trajectory_id`` for ``owner_id``, waiting up to ``timeout_s`` seconds for a live
    lease of another owner to expire or be released.

    Args:
        coordinator: the lease service.
        trajectory_id, owner_id: what to acquire, and for whom.
        ttl_s: the term of the new lease (seconds).
        timeout_s: the longest wait (seconds, 0 .. :data:`MAX_LEASE_WAIT_S`; 0 asks once).
        interval_s: the longest pause between two requests (seconds, > 0, at most 60); the pause
            is shorter when the refusal says the lease ends sooner, and never runs past the deadline.
        store: if given, the grant goes through :func:`~kernel_lib.ownership.leases.take_ownership`,
            which also installs the new epoch as the log's fence; otherwise the caller installs it.
        clock, sleep: the monotonic clock and the sleep used for the wait (tests inject fakes).

    Returns: a :class:`LeaseWait`.

    Raises:
        LeaseWaitTimeoutError: the lease was still held when ``timeout_s`` had passed (nothing
            granted; the error names the holder seen last and how long the wait lasted).
        ConfigError: a bad ``timeout_s`` or ``interval_s`` (and the coordinator's own ConfigError
            for a bad id or ttl).
        LeaseLostError, CoordinatorUnavailableError, StoreError: as ``acquire`` / ``take_ownership``.
    """
    timeout_s = _seconds("timeout_s", timeout_s, low=0.0, high=MAX_LEASE_WAIT_S)
    interval_s = _seconds("interval_s", interval_s, low=0.0, high=60.0, low_open=True)
    start = clock()
    deadline = start + timeout_s
    attempts, held_by = 0, []
    while True:
        attempts += 1
        try:
            if store is not None:
                lease = take_ownership(coordinator, store, trajectory_id, owner_id, ttl_s)
            else:
                lease = coordinator.acquire(trajectory_id, owner_id, ttl_s)
            return LeaseWait(lease=lease, waited_s=clock() - start, attempts=attempts, held_by=tuple(held_by))
        except LeaseHeldError as exc:
            holder = (exc.holder, exc.owner_epoch)
            if holder not in held_by:
                held_by.append(holder)
            now = clock()
            if now >= deadline:
                raise LeaseWaitTimeoutError(
                    f"{trajectory_id} is still held by {exc.holder or '?'} (owner_epoch={exc.owner_epoch}) after "
                    f"waiting {now - start:.3f} s (timeout_s={timeout_s:g}); nothing was granted",
                    waited_s=now - start, attempts=attempts, trajectory_id=trajectory_id, holder=exc.holder,
                    owner_epoch=exc.owner_epoch, expires_at_s=exc.expires_at_s, remaining_s=exc.remaining_s,
                ) from exc
            pause = interval_s if exc.remaining_s <= 0 else min(exc.remaining_s, interval_s)
            sleep(max(0.001, min(pause, deadline - now)))
