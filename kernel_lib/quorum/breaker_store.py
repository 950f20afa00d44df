"""Breaker state shared across hosts: :class:`EtcdBreakerStore`, a
:class:`~kernel_lib.recovery.gateway.runner.BreakerStore` on the quorum tier's etcd cluster
(Failure Recovery, "Tool Circuit Breakers"; the breaker trips for every trajectory that calls the
dependency, wherever it runs).

Keys (under ``prefix``, default ``b"kernel_lib/"``)::

    breaker/<dependency_id>                     {"state": BreakerState JSON, "config": BreakerConfig JSON}
    breaker-transition/<dependency_id>/<gen>    one Transition (JSON), gen = its generation, 12 digits

An update is a compare-and-swap: read the key and its ``mod_revision``, apply the pure decision,
and commit in one etcd transaction guarded by ``mod_revision == seen`` (``create_revision == 0``
for a new key) that writes the state and its transition keys together. A lost race re-reads and
re-decides (bounded), so the half-open canary is single across hosts for the same reason it is on
one host: admitting it is one atomic read-decide-write.

Freshness is bounded by time, not checked per call: a state read less than ``max_staleness_s``
ago (default 0.1 s) is used as is (etcd has no cheap "changed since" probe short of a watch), so a
host may admit calls for up to that long after another host opened the breaker; decisions that
change the state always go through the compare-and-swap on the current value.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from kernel_lib.errors import BreakerStoreError, GatewayConfigError, QuorumUnavailableError, StoreError
from kernel_lib.quorum.client import EtcdClient, unb64
from kernel_lib.recovery.gateway.breaker import BreakerConfig, BreakerState, Transition, initial_state
from kernel_lib.recovery.gateway.runner import Update

__all__ = ["EtcdBreakerStore"]

#: compare-and-swap attempts before an update gives up (each lost race means another writer won)
CAS_ATTEMPTS_MAX = 64


class EtcdBreakerStore:
    """Breaker states in etcd (module docstring).

    Args:
        endpoints: the cluster's client URLs (a list or one comma-separated string), or an
            :class:`EtcdClient` to share.
        prefix: key prefix (bytes).
        max_staleness_s: how long a read state is trusted without asking etcd again (s, >= 0).
        timeout_s: the client's request timeout (s) when ``endpoints`` are URLs.

    Raises:
        GatewayConfigError: a bad argument. (Requests raise BreakerStoreError, retryable when no
        majority answered.)
    """

    def __init__(self, endpoints: "EtcdClient | list[str] | str", *, prefix: bytes = b"kernel_lib/",
                 max_staleness_s: float = 0.1, timeout_s: float = 5.0):
        if isinstance(max_staleness_s, bool) or not isinstance(max_staleness_s, (int, float)) \
                or not math.isfinite(max_staleness_s) or max_staleness_s < 0:
            raise GatewayConfigError(f"max_staleness_s must be a finite number of seconds >= 0, got "
                                     f"{max_staleness_s!r}", field="max_staleness_s")
        if not isinstance(prefix, bytes):
            raise GatewayConfigError("prefix must be bytes", field="prefix")
        self.client = endpoints if isinstance(endpoints, EtcdClient) else EtcdClient(endpoints, timeout_s=timeout_s)
        self._own_client = not isinstance(endpoints, EtcdClient)
        self.prefix = prefix
        self.max_staleness_s = float(max_staleness_s)
        self.stats = {"loads": 0, "transactions": 0, "cas_conflicts": 0, "writes": 0}

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> "EtcdBreakerStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _key(self, dependency_id: str) -> bytes:
        return self.prefix + b"breaker/" + dependency_id.encode()

    def _tkey(self, dependency_id: str, generation: int) -> bytes:
        return self.prefix + b"breaker-transition/" + dependency_id.encode() + b"/" + b"%012d" % generation

    def _read(self, dependency_id: str, config: BreakerConfig) -> tuple[BreakerState, int]:
        try:
            kv = self.client.get(self._key(dependency_id))
        except QuorumUnavailableError as exc:
            raise BreakerStoreError(f"etcd breaker store: no majority answered for {dependency_id!r}: {exc}",
                                    dependency_id=dependency_id, retryable=True) from exc
        except StoreError as exc:
            raise BreakerStoreError(f"etcd breaker store: {exc}", dependency_id=dependency_id) from exc
        if kv is None:
            return initial_state(config), 0
        try:
            doc = json.loads(unb64(kv.get("value")))
            stored = doc["config"]
            state = BreakerState.from_json(doc["state"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BreakerStoreError(f"etcd breaker store: the value of {dependency_id!r} is not a breaker state "
                                    f"({exc})", dependency_id=dependency_id) from None
        if stored != config.to_json():
            raise BreakerStoreError(f"etcd breaker store: {dependency_id!r} was written with another configuration "
                                    f"({json.dumps(stored)}); every worker sharing it must use the same one",
                                    dependency_id=dependency_id)
        return state, int(kv.get("mod_revision", 0))

    def load(self, dependency_id: str, config: BreakerConfig) -> tuple[BreakerState, object]:
        self.stats["loads"] += 1
        state, _ = self._read(dependency_id, config)
        return state, time.monotonic()

    def is_fresh(self, dependency_id: str, token: object) -> bool:
        return isinstance(token, float) and time.monotonic() - token < self.max_staleness_s

    def update(self, dependency_id: str, config: BreakerConfig, fn: Update
               ) -> tuple[BreakerState, tuple[Transition, ...], object, Any]:
        key = self._key(dependency_id)
        for _ in range(CAS_ATTEMPTS_MAX):
            self.stats["transactions"] += 1
            state, rev = self._read(dependency_id, config)
            new, trs, result = fn(state)
            if new is state and not trs:
                return new, trs, time.monotonic(), result
            c = self.client
            value = json.dumps({"state": new.to_json(), "config": config.to_json()}).encode()
            ops = [c.op_put(key, value)] + [c.op_put(self._tkey(dependency_id, t.generation),
                                                     json.dumps(t.to_json()).encode()) for t in trs]
            guard = c.cmp_mod(key, rev) if rev else c.cmp_missing(key)
            try:
                answer = c.txn([guard], ops, idempotent=True)
            except QuorumUnavailableError as exc:
                raise BreakerStoreError(f"etcd breaker store: no majority acknowledged the update of "
                                        f"{dependency_id!r}: {exc}", dependency_id=dependency_id,
                                        retryable=True) from exc
            except StoreError as exc:
                raise BreakerStoreError(f"etcd breaker store: {exc}", dependency_id=dependency_id) from exc
            if answer.get("succeeded"):
                self.stats["writes"] += 1
                return new, trs, time.monotonic(), result
            self.stats["cas_conflicts"] += 1
        raise BreakerStoreError(f"etcd breaker store: {CAS_ATTEMPTS_MAX} compare-and-swap attempts on "
                                f"{dependency_id!r} all lost to other writers", dependency_id=dependency_id,
                                retryable=True)

    def transitions(self, dependency_id: str | None = None, *, limit: int = 1000) -> list[tuple[str, Transition]]:
        base = self.prefix + b"breaker-transition/"
        pre = base + (dependency_id.encode() + b"/" if dependency_id is not None else b"")
        try:
            kvs = self.client.range_prefix(pre)
        except (QuorumUnavailableError, StoreError) as exc:
            raise BreakerStoreError(f"etcd breaker store: cannot list transitions: {exc}",
                                    retryable=isinstance(exc, QuorumUnavailableError)) from exc
        out = []
        for kv in kvs:
            k = unb64(kv.get("key"))[len(base):]
            dep = k.rsplit(b"/", 1)[0].decode()
            d = json.loads(unb64(kv.get("value")))
            out.append((dep, Transition(**d)))
        out.sort(key=lambda r: (r[1].at_s, r[1].generation))
        return out[-limit:]
