"""A small etcd v3 client over etcd's JSON gateway (``/v3/kv/...``, ``/v3/lease/...``), with httpx.

Only what the quorum store and the coordinator need: range, put, delete, txn, lease grant /
keep-alive / revoke, member health. Keys and values travel base64-encoded, as the gateway
requires. Requests go to one member at a time; a member that does not answer (killed, paused,
partitioned) is skipped for the next, so the client follows the surviving majority.

A write is acknowledged only when etcd answers it, which etcd does after the Raft leader has
committed the entry on a majority of members (each member fsyncs its Raft log before it
acknowledges to the leader). When no member answers within ``timeout_s`` — e.g. no majority is
alive, so nothing can commit — :class:`QuorumUnavailableError` is raised: the write was not
acknowledged and may or may not commit later (the caller treats it as in doubt, never as done).
"""

from __future__ import annotations

import base64
import math
import time
import urllib.parse
from typing import Any, Sequence


from kernel_lib.errors import ConfigError, QuorumSetupError, QuorumUnavailableError, StoreError


def b64(data: "bytes | str") -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def range_end_for_prefix(prefix: bytes) -> bytes:
    """The key just after every key starting with ``prefix`` (etcd's prefix range)."""
    p = bytearray(prefix)
    for i in range(len(p) - 1, -1, -1):
        if p[i] < 0xFF:
            p[i] += 1
            return bytes(p[: i + 1])
    return b"\0"



def _httpx():
    """httpx, imported when a client is made: the quorum tier is an extra (``pip install
    durable-agents-lab[quorum]``), so the kernel and its CLI load without it."""
    try:
        import httpx
    except ImportError:
        raise QuorumSetupError("the quorum tier needs httpx: pip install 'durable-agents-lab[quorum]'") from None
    return httpx

class EtcdClient:
    """Talk to an etcd cluster through its JSON gateway.

    Args:
        endpoints: client URLs (``http://127.0.0.1:PORT``), at least one.
        timeout_s: how long one request may wait for an acknowledgment before it is given up
            (then :class:`QuorumUnavailableError`); a write to a cluster without a majority waits
            this long.

    Raises:
        ConfigError: no endpoints, or a bad timeout.
    """

    def __init__(self, endpoints: "Sequence[str] | str", *, timeout_s: float = 5.0):
        if isinstance(endpoints, str):          # one URL, or several separated by commas
            endpoints = endpoints.split(",")
        try:
            eps = [e.strip().rstrip("/") for e in endpoints if isinstance(e, str) and e.strip()]
        except TypeError:
            raise ConfigError(f"endpoints must be URLs (a list, or one comma-separated string), got "
                              f"{endpoints!r}") from None
        if not eps:
            raise ConfigError("an etcd client needs at least one endpoint URL")
        for e in eps:
            u = urllib.parse.urlsplit(e)
            try:
                port = u.port
            except ValueError:
                port = None
            if u.scheme not in ("http", "https") or not u.hostname or port is None:
                raise ConfigError(f"etcd endpoint {e!r} is not an http(s)://HOST:PORT URL (e.g. "
                                  "http://127.0.0.1:2379)")
        if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s)
                or timeout_s <= 0):
            raise ConfigError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
        self.endpoints = eps
        self.timeout_s = float(timeout_s)
        self._preferred = 0
        httpx = self._httpx = _httpx()
        self._http = httpx.Client(timeout=httpx.Timeout(self.timeout_s, connect=min(0.5, self.timeout_s)))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "EtcdClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------------
    def call(self, path: str, body: dict[str, Any], *, idempotent: bool = True) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the first member that answers, going round the members
        until ``timeout_s`` is spent (each attempt gets a share of it, so a silent member, e.g.
        one stopped with SIGSTOP, cannot use it all).

        ``idempotent``: the request may be sent again to another member after one did not
        answer (reads; compare-and-set transactions whose comparisons make a second application
        a no-op, as every write of :class:`~kernel_lib.quorum.EtcdStore` is). A non-idempotent
        request that got no answer is not re-sent: it may still commit.

        Raises:
            QuorumUnavailableError: no member acknowledged within the timeout.
            StoreError: etcd answered with an error (e.g. a lease that does not exist).
        """
        deadline = time.monotonic() + self.timeout_s
        errors: list[str] = []
        n = len(self.endpoints)
        attempt_s = max(0.3, self.timeout_s / max(n, 1))
        k = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            i = (self._preferred + k) % n
            k += 1
            url = self.endpoints[i] + path
            wait = min(left, attempt_s)
            try:
                r = self._http.post(url, json=body, timeout=self._httpx.Timeout(wait, connect=min(0.3, wait)))
            except self._httpx.ConnectError as exc:
                errors.append(f"{self.endpoints[i]}: not reachable ({type(exc).__name__})")
                if k % n == 0:
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                continue
            except self._httpx.TimeoutException as exc:
                errors.append(f"{self.endpoints[i]}: no answer within {wait:.2f} s ({type(exc).__name__})")
                if not idempotent:
                    break        # the write may be in the leader's log: do not send it twice
                continue
            except self._httpx.HTTPError as exc:
                errors.append(f"{self.endpoints[i]}: {type(exc).__name__}: {exc}")
                continue
            try:
                data = r.json()
            except ValueError:
                errors.append(f"{self.endpoints[i]}: HTTP {r.status_code}, not JSON")
                continue
            if not isinstance(data, dict):
                raise StoreError(f"{self.endpoints[i]} answered {path} with JSON that is not an etcd reply "
                                 f"({type(data).__name__}): is this an etcd member?")
            if r.status_code != 200:
                msg = str(data.get("error") or data.get("message") or data)[:200]
                if r.status_code in (503, 504) or "leader" in msg or "timed out" in msg or "unavailable" in msg:
                    errors.append(f"{self.endpoints[i]}: {msg}")
                    if not idempotent and "timed out" in msg:
                        break
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                    continue
                raise StoreError(f"etcd at {self.endpoints[i]} refused {path}: {msg}")
            self._preferred = i
            return data
        seen = list(dict.fromkeys(errors))[-len(self.endpoints):]
        what = {"/v3/kv/txn": "the write", "/v3/kv/range": "the read", "/v3/kv/put": "the write"}.get(path, path)
        raise QuorumUnavailableError(
            f"no etcd member acknowledged {what} within {self.timeout_s:g} s (fewer than a majority of members "
            "answering, or none): " + "; ".join(seen) + ". Nothing is acknowledged.")

    # --- kv ---------------------------------------------------------------------------------------------------
    def get(self, key: bytes) -> dict[str, Any] | None:
        kvs = self.call("/v3/kv/range", {"key": b64(key)}).get("kvs") or []
        return kvs[0] if kvs else None

    def get_value(self, key: bytes) -> bytes | None:
        kv = self.get(key)
        return unb64(kv.get("value")) if kv else None

    def range_prefix(self, prefix: bytes, *, limit: int = 0, keys_only: bool = False,
                     start: bytes | None = None, end: bytes | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"key": b64(start or prefix), "range_end": b64(end or range_end_for_prefix(prefix))}
        if limit:
            body["limit"] = str(limit)
        if keys_only:
            body["keys_only"] = True
        return self.call("/v3/kv/range", body).get("kvs") or []

    def put(self, key: bytes, value: bytes, *, lease: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return self.call("/v3/kv/put", body, idempotent=False)

    def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
            failure: list[dict[str, Any]] | None = None, *, idempotent: bool = False) -> dict[str, Any]:
        """One atomic transaction: if every comparison holds, run ``success`` else ``failure``.
        Returns etcd's answer (``succeeded`` is False or missing when a comparison failed).
        Pass ``idempotent=True`` only when the comparisons make a second application fail
        harmlessly (a compare-and-set)."""
        return self.call("/v3/kv/txn", {"compare": compare, "success": success, "failure": failure or []},
                         idempotent=idempotent)

    # --- leases ----------------------------------------------------------------------------------------------
    def lease_grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease of ``ttl_s`` whole seconds; returns (lease id, granted TTL)."""
        data = self.call("/v3/lease/grant", {"TTL": str(int(ttl_s))}, idempotent=True)   # a spare lease just expires
        if data.get("error"):
            raise StoreError(f"etcd refused a lease: {data['error']}")
        try:
            return int(data["ID"]), int(data["TTL"])
        except (KeyError, TypeError, ValueError):
            raise StoreError(f"the lease grant answer is not etcd's ({str(data)[:120]}): "
                             "is this an etcd member?") from None

    def lease_keepalive(self, lease_id: int) -> int:
        """Renew a lease; returns its new TTL (0 or less: it had already expired)."""
        data = self.call("/v3/lease/keepalive", {"ID": str(lease_id)})
        result = data.get("result", data)
        return int(result.get("TTL", 0) or 0)

    def lease_revoke(self, lease_id: int) -> None:
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease_id)}, idempotent=False)
        except StoreError as exc:
            if "not found" not in str(exc):
                raise

    def lease_ttl(self, lease_id: int) -> int:
        data = self.call("/v3/lease/timetolive", {"ID": str(lease_id)})
        return int(data.get("TTL", -1))

    # --- ops for txn bodies ------------------------------------------------------------------------------------
    @staticmethod
    def op_put(key: bytes, value: bytes, lease: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return {"request_put": body}

    @staticmethod
    def op_get(key: bytes) -> dict[str, Any]:
        return {"request_range": {"key": b64(key)}}

    @staticmethod
    def cmp_value(key: bytes, result: str, value: bytes) -> dict[str, Any]:
        return {"key": b64(key), "target": "VALUE", "result": result, "value": b64(value)}

    @staticmethod
    def cmp_missing(key: bytes) -> dict[str, Any]:
        return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}

    @staticmethod
    def cmp_mod(key: bytes, revision: int) -> dict[str, Any]:
        return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}
