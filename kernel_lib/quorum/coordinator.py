"""The ownership coordinator of §11.5.1 on etcd leases.

A grant is one etcd transaction:

* compare: the trajectory's owner key is absent (no live lease: the previous one expired, was
  released, or never existed) or is the caller's own grant; the epoch key holds the epoch read;
* then: write the epoch key with the next owner_epoch (a compare-and-swap: two claimants never
  get the same epoch) and the owner key, attached to an etcd lease with the grant's TTL, plus a
  persistent record of the grant (``grant/<trajectory>``) for :meth:`current` after expiry.

etcd deletes the owner key when its lease's TTL runs out without a keep-alive (its own clock, on
the Raft leader), so the TTL bounds how long a lost worker blocks recovery. A frozen worker cannot
renew (:meth:`renew` finds its key gone or superseded and raises LeaseLostError), and its
owner_epoch is fenced by every boundary that has seen the newer one.

Clocks: ``now=`` arguments are recorded in the returned :class:`~kernel_lib.ownership.leases.Lease`
(``granted_at_s``, ``expires_at_s`` on this client's clock) but cannot move etcd's lease clock;
whether a lease is live is decided by etcd. Whole seconds only: etcd TTLs are integers, so a
``ttl_s`` is rounded up.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from typing import Callable, Sequence

from kernel_lib._support.checks import check_id, check_seconds
from kernel_lib.errors import ConfigError, CoordinatorUnavailableError, LeaseHeldError, LeaseLostError, StoreError
from kernel_lib.log.base import MAX_OWNER_EPOCH, FailureDomain
from kernel_lib.limits import ETCD_LEASE_TTL_S_MAX
from kernel_lib.ownership.leases import Lease, OwnershipCoordinator
from kernel_lib.quorum.client import EtcdClient, unb64

_DIGITS = 20


def _num(n: int) -> bytes:
    return f"{n:0{_DIGITS}d}".encode()


class EtcdOwnershipCoordinator(OwnershipCoordinator):
    """Leases and owner_epochs on an etcd cluster (module docstring).

    Args:
        endpoints: the members' client URLs, or an :class:`EtcdClient`.
        prefix: key prefix (default ``kl-own/``).
        clock: the local clock used to stamp leases (default ``time.time``).
        timeout_s: per-request timeout; a coordinator that cannot reach a majority raises
            :class:`~kernel_lib.errors.CoordinatorUnavailableError` (nothing granted).
    """

    survives_up_to = FailureDomain.VOLUME_LOSS
    name = "etcd-coordinator"

    def __init__(self, endpoints: "Sequence[str] | EtcdClient", *, prefix: str = "kl-own/",
                 clock: Callable[[], float] = time.time, timeout_s: float = 5.0):
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a string, got {prefix!r}")
        self.client = endpoints if isinstance(endpoints, EtcdClient) else EtcdClient(endpoints, timeout_s=timeout_s)
        self.prefix = prefix.encode()
        self.clock = clock

    def close(self) -> None:
        self.client.close()

    def _k(self, kind: str, trajectory_id: str) -> bytes:
        # the id percent-encoded: "hh" and "hh/x" never share a key prefix
        return self.prefix + kind.encode() + b"/" + urllib.parse.quote(trajectory_id, safe="").encode()

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except StoreError as exc:
            raise CoordinatorUnavailableError(f"{self.name}: {exc}; nothing was decided",
                                              retryable=exc.retryable) from exc   # e.g. no majority: retryable

    def _read(self, trajectory_id: str) -> tuple[dict | None, int, int, dict | None]:
        """(owner record or None, its mod revision, epoch, last grant record or None)."""
        c = self.client
        resp = self._call(c.call, "/v3/kv/txn", {"compare": [], "success": [
            c.op_get(self._k("owner", trajectory_id)), c.op_get(self._k("epoch", trajectory_id)),
            c.op_get(self._k("grant", trajectory_id))]})
        out = []
        for r in resp.get("responses", []):
            kvs = r.get("response_range", {}).get("kvs") or []
            out.append(kvs[0] if kvs else None)
        owner_kv, epoch_kv, grant_kv = (out + [None, None, None])[:3]
        try:
            owner = json.loads(unb64(owner_kv["value"])) if owner_kv else None
            rev = int(owner_kv["mod_revision"]) if owner_kv else 0
            epoch = int(unb64(epoch_kv["value"])) if epoch_kv else 0
            grant = json.loads(unb64(grant_kv["value"])) if grant_kv else None
        except (KeyError, TypeError, ValueError) as exc:
            raise CoordinatorUnavailableError(f"{self.name}: the grant keys of {trajectory_id!r} do not read as this "
                                              f"coordinator's ({type(exc).__name__}); nothing was decided",
                                              retryable=False) from exc
        return owner, rev, epoch, grant

    def acquire(self, trajectory_id: str, owner_id: str, ttl_s: float, now: float | None = None, *,
                min_epoch: int = 0) -> Lease:
        check_id("trajectory_id", trajectory_id)
        check_id("owner_id", owner_id)
        ttl = check_seconds("ttl_s", ttl_s, positive=True)
        if ttl > ETCD_LEASE_TTL_S_MAX:
            raise ConfigError(f"ttl_s must be at most {ETCD_LEASE_TTL_S_MAX:.0f} s (etcd's longest lease), "
                              f"got {ttl_s!r}")
        if type(min_epoch) is not int or not 0 <= min_epoch < MAX_OWNER_EPOCH:
            raise ConfigError(f"min_epoch must be an int from 0 to 2**63 - 2, got {min_epoch!r}")
        t = self._now(now)
        c = self.client
        for _ in range(20):
            owner, rev, epoch, _grant = self._read(trajectory_id)
            if owner is not None and owner["owner_id"] != owner_id:
                raise LeaseHeldError(
                    f"{trajectory_id} is held by {owner['owner_id']} (owner_epoch={owner['owner_epoch']}) under a live "
                    "etcd lease", trajectory_id=trajectory_id, holder=owner["owner_id"],
                    owner_epoch=owner["owner_epoch"], expires_at_s=owner.get("expires_at_s", t))
            lease_id, granted_ttl = self._call(c.lease_grant, max(1, math.ceil(ttl)))
            new_epoch = max(epoch, min_epoch) + 1
            rec = {"owner_id": owner_id, "owner_epoch": new_epoch, "granted_at_s": t, "expires_at_s": t + granted_ttl,
                   "lease_id": lease_id, "released": False}
            body = json.dumps(rec).encode()
            ok_key = self._k("owner", trajectory_id)
            compare = [c.cmp_mod(ok_key, rev) if owner is not None else c.cmp_missing(ok_key),
                       c.cmp_value(self._k("epoch", trajectory_id), "EQUAL", _num(epoch)) if epoch
                       else c.cmp_missing(self._k("epoch", trajectory_id))]
            success = [c.op_put(ok_key, body, lease_id),
                       c.op_put(self._k("epoch", trajectory_id), _num(new_epoch)),
                       c.op_put(self._k("grant", trajectory_id), body),
                       c.op_put(self._k("history", trajectory_id) + b"/" + _num(new_epoch), body)]
            # compare-and-set: a re-send cannot grant twice
            resp = self._call(lambda: c.txn(compare, success, idempotent=True))  # noqa: B023  _call runs it at once
            if not resp.get("succeeded"):
                # A re-sent transaction fails its comparisons when the first send had committed
                # (its answer lost, e.g. in a leader election): then the grant is ours already.
                now_owner = self._read(trajectory_id)[0]
                if now_owner is not None and int(now_owner.get("lease_id", -1)) == lease_id:
                    resp = {"succeeded": True}
            if resp.get("succeeded"):
                if owner is not None:      # our own earlier grant is now stale: drop its lease
                    self._call(c.lease_revoke, int(owner["lease_id"]))
                return Lease(trajectory_id, owner_id, new_epoch, t, t + granted_ttl)
            self._call(c.lease_revoke, lease_id)
        raise CoordinatorUnavailableError(f"{self.name}: the grant of {trajectory_id} kept changing; nothing decided")

    def renew(self, lease: Lease, now: float | None = None, ttl_s: float | None = None) -> Lease:
        t = self._now(now)
        owner, _rev, _epoch, grant = self._read(lease.trajectory_id)
        if owner is None or owner["owner_epoch"] != lease.owner_epoch or owner["owner_id"] != lease.owner_id:
            cur = owner or grant
            newer = cur is not None and cur["owner_epoch"] > lease.owner_epoch
            reason = "superseded" if newer else ("released" if grant and grant.get("released") else "expired")
            raise LeaseLostError(f"the etcd lease for {lease.trajectory_id} (owner_epoch={lease.owner_epoch}) is "
                                 f"{reason}", trajectory_id=lease.trajectory_id, owner_epoch=lease.owner_epoch,
                                 current_epoch=cur["owner_epoch"] if cur else 0, reason=reason)
        if ttl_s is not None:
            check_seconds("ttl_s", ttl_s, positive=True)
        left = self._call(self.client.lease_keepalive, int(owner["lease_id"]))
        if left <= 0:
            raise LeaseLostError(f"the etcd lease for {lease.trajectory_id} expired before it was renewed",
                                 trajectory_id=lease.trajectory_id, owner_epoch=lease.owner_epoch,
                                 current_epoch=lease.owner_epoch, reason="expired")
        return Lease(lease.trajectory_id, lease.owner_id, lease.owner_epoch, t, t + left)

    def release(self, lease: Lease, now: float | None = None) -> bool:
        self._now(now)
        c = self.client
        owner, rev, _epoch, _grant = self._read(lease.trajectory_id)
        if owner is None or owner["owner_epoch"] != lease.owner_epoch or owner["owner_id"] != lease.owner_id:
            return False
        rec = dict(owner, released=True)
        resp = self._call(c.txn, [c.cmp_mod(self._k("owner", lease.trajectory_id), rev)],
                          [{"request_delete_range": {"key": c.op_get(self._k("owner", lease.trajectory_id))
                                                     ["request_range"]["key"]}},
                           c.op_put(self._k("grant", lease.trajectory_id), json.dumps(rec).encode())])
        if resp.get("succeeded"):
            self._call(c.lease_revoke, int(owner["lease_id"]))
            return True
        return False

    def current(self, trajectory_id: str, now: float | None = None) -> Lease | None:
        t = self._now(now)
        owner, _rev, _epoch, grant = self._read(trajectory_id)
        if owner is not None:
            # the key exists, so etcd holds the lease live; its TTL is reported in whole seconds
            # (rounded down), so 0 means "expires within a second": treated as expiring now
            left = self._call(self.client.lease_ttl, int(owner["lease_id"]))
            if left >= 0:
                return Lease(trajectory_id, owner["owner_id"], owner["owner_epoch"], owner["granted_at_s"],
                             t + left)
        if grant is None:
            return None
        expired_at = min(t, grant.get("expires_at_s", t)) if not grant.get("released") else grant["expires_at_s"]
        return Lease(trajectory_id, grant["owner_id"], grant["owner_epoch"], grant["granted_at_s"],
                     min(expired_at, t), released=bool(grant.get("released")))

    def history(self, trajectory_id: str) -> list[Lease]:
        """Every grant ever made for the trajectory, oldest first (the epoch history)."""
        prefix = self._k("history", trajectory_id) + b"/"
        kvs = self._call(self.client.range_prefix, prefix)
        out = []
        for kv in kvs:
            g = json.loads(unb64(kv["value"]))
            out.append(Lease(trajectory_id, g["owner_id"], g["owner_epoch"], g["granted_at_s"], g["expires_at_s"]))
        return sorted(out, key=lambda lease: lease.owner_epoch)


def open_coordinator(spec: str, **kw) -> OwnershipCoordinator:
    """A coordinator from a command-line spec: ``etcd:URL[,URL...]`` for :class:`EtcdOwnershipCoordinator`,
    anything else is the path of a :class:`~kernel_lib.ownership.leases.SQLiteOwnershipCoordinator` file."""
    from kernel_lib.ownership.leases import SQLiteOwnershipCoordinator

    if isinstance(spec, str) and spec.startswith("etcd:"):
        return EtcdOwnershipCoordinator([u for u in spec[5:].split(",") if u.strip()], **kw)
    return SQLiteOwnershipCoordinator.open(spec, **kw)
