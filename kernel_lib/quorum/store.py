"""The quorum tier: a trajectory log on an etcd cluster (§11.3.1 table 2 row 3, §11.5.1, §11.8.4).

An append is acknowledged only when etcd answers the transaction that stores it, i.e. after the
Raft leader committed it on a majority of members, each of which synced it to its own disk. With
members on volumes other than the worker's, the acknowledgment survives losing the worker's
volume and any minority of members: :attr:`EtcdStore.offered_tiers` is ``(QUORUM,)``.

Keys (under a ``prefix``, default ``kl/``)::

    t/<trajectory>/e/<sequence, 20 digits>   canonical event bytes
    t/<trajectory>/head                      last sequence number (20 digits)
    t/<trajectory>/fence                     newest owner_epoch seen (20 digits)
    id/<event id>                            "<trajectory>\\n<sequence>\\n<digest>"
    tl/<trajectory>                          present once the trajectory has an event

(ids percent-encoded, so ``/`` in a trajectory id cannot reach into another's keys). An event's
canonical bytes may be at most :data:`kernel_lib.limits.EVENT_BYTES_MAX` (the bound of every
store, chosen so one such event fits an etcd transaction; etcd limits a request's size); larger
payloads belong in a blob store, referenced by digest (§11.8.2). A batch is split into
transactions of at most :data:`~kernel_lib.limits.ETCD_TXN_EVENTS_MAX` events and
:data:`~kernel_lib.limits.ETCD_TXN_BYTES_MAX` encoded bytes.

Every batch is decided under the shared append contract (:func:`kernel_lib.log.base.check_append`:
gapless sequence numbers, owner_epoch fencing, semantic deduplication) against the state read
from the cluster, and written with ONE etcd transaction whose comparisons pin that state: the
head and fence of each trajectory touched are what was read, and each new event id is absent.
If another writer changed any of them in between (a zombie, a new owner, a concurrent append),
the transaction does not apply and the batch is decided again from the new state. So the fence
check is atomic with the append, in the store itself, with no lock held outside it.
"""

from __future__ import annotations

import urllib.parse
from typing import Iterator, Sequence

from kernel_lib.errors import ConfigError, CorruptLogError, StoreClosedError, StoreError, StoreReadOnlyError
from kernel_lib.core.events import Event, decode_stored, digest
from kernel_lib.log.base import (
    MAX_OWNER_EPOCH,
    AckTier,
    AppendOutcome,
    LogStore,
    RecoveryReport,
    StoredRef,
    check_append,
    check_claim_args,
    check_events,
    check_fence_args,
    check_fence_not_older,
    next_claimed_epoch,
    read_bounds,
)
from kernel_lib.log.stores import register_store_kind
from kernel_lib.limits import ETCD_TXN_BYTES_MAX, ETCD_TXN_EVENTS_MAX, ETCD_TXN_TRIES_MAX, etcd_encoded_bytes
from kernel_lib.quorum.client import EtcdClient, unb64

_DIGITS = 20


def _num(n: int) -> bytes:
    return f"{n:0{_DIGITS}d}".encode()


class EtcdStore(LogStore):
    """A log store on an etcd cluster (module docstring).

    Args:
        endpoints: the members' client URLs, or an :class:`EtcdClient`.
        prefix: key prefix, so several logs can share one cluster.
        timeout_s: how long an append waits for a quorum acknowledgment before
            :class:`~kernel_lib.errors.QuorumUnavailableError` (nothing acknowledged).
        read_only: refuse appends and fences (StoreReadOnlyError); reads are unchanged.

    Raises:
        ConfigError: no endpoints or a bad timeout.
    """

    name = "etcd"
    offered_tiers = (AckTier.QUORUM,)

    def __init__(self, endpoints: "Sequence[str] | EtcdClient", *, prefix: str = "kl/", timeout_s: float = 5.0,
                 read_only: bool = False):
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a string, got {prefix!r}")
        self.client = endpoints if isinstance(endpoints, EtcdClient) else EtcdClient(endpoints, timeout_s=timeout_s)
        self.prefix = prefix.encode()
        self.read_only = bool(read_only)
        self.recovery = RecoveryReport(store=self.name, path=",".join(self.client.endpoints), read_only=self.read_only)
        self._closed = False

    def _writable(self) -> None:
        self._open()
        if self.read_only:
            raise StoreReadOnlyError("this etcd store was opened read-only; it takes no appends or fences")

    @classmethod
    def open(cls, endpoints: "str | Sequence[str]", **kw) -> "EtcdStore":
        """``endpoints`` as a list or a comma-separated string of client URLs."""
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",") if e.strip()]
        return cls(endpoints, **kw)

    def members(self) -> int:
        """How many members the cluster has (asked of the cluster: ``/v3/cluster/member/list``)."""
        self._open()
        return len(self.client.call("/v3/cluster/member/list", {}).get("members") or [])

    def declaration(self) -> dict:
        """What this store promises (§11.3.1 table 2 row 3, footnote 3): an acknowledgment is a Raft
        commit on a majority, so it survives the loss of any minority of members, and of the
        worker's volume provided no majority of members shares that volume (placement is not
        something the store can see; ``quorum-placement`` shows what happens when it is wrong).

        Raises QuorumUnavailableError if no member answers."""
        n = self.members()
        return {"store": self.name, "tier": AckTier.QUORUM.label,
                "survives": [d.label for d in sorted(AckTier.QUORUM.survives) if d.value > 0],
                "members": n, "majority": n // 2 + 1, "tolerates_member_losses": (n - 1) // 2,
                "condition": "members placed on volumes other than the worker's (no majority co-located)"}

    # --- keys -------------------------------------------------------------------------------------
    def _k(self, *parts: "str | bytes") -> bytes:
        return self.prefix + b"/".join(p.encode() if isinstance(p, str) else p for p in parts)

    @staticmethod
    def _t(trajectory_id: str) -> str:
        """A trajectory id as one key segment: ``/`` and ``%`` escaped, so no id can reach into
        another's key range (``x`` and ``x/e/0…1`` stay apart)."""
        return urllib.parse.quote(trajectory_id, safe="")

    def _ev_key(self, t: str, seq: int) -> bytes:
        return self._k("t", self._t(t), "e", _num(seq))

    def _open(self) -> None:
        if self._closed:
            raise StoreClosedError("etcd store is closed")

    # --- state ------------------------------------------------------------------------------------
    def _state(self, tids: set[str], ids: list[str]) -> tuple[dict[str, int], dict[str, int], dict[str, StoredRef]]:
        """Heads, fences and stored event ids, read in one linearizable transaction."""
        c = self.client
        tids_l, ops = sorted(tids), []
        for t in tids_l:
            ops += [c.op_get(self._k("t", self._t(t), "head")), c.op_get(self._k("t", self._t(t), "fence"))]
        ops += [c.op_get(self._k("id", urllib.parse.quote(i, safe=""))) for i in ids]
        resp = c.call("/v3/kv/txn", {"compare": [], "success": ops}) if ops else {"responses": []}
        vals = []
        responses = resp.get("responses", [])
        if not isinstance(responses, list) or len(responses) != len(ops):
            raise StoreError(f"the etcd read answered {len(responses) if isinstance(responses, list) else responses!r} "
                             f"results for {len(ops)} reads: is this an etcd member?")
        for r in responses:
            kvs = (r.get("response_range") or {}).get("kvs") or [] if isinstance(r, dict) else []
            vals.append(unb64(kvs[0].get("value")) if kvs else None)
        heads, fences = {}, {}
        for n, t in enumerate(tids_l):
            h, f = vals[2 * n], vals[2 * n + 1]
            heads[t], fences[t] = int(h) if h else 0, int(f) if f else 0
        refs = {}
        for i, v in zip(ids, vals[2 * len(tids_l):]):
            if v is not None:
                t, s, d = v.decode().split("\n")
                refs[i] = StoredRef(t, int(s), d)
        return heads, fences, refs

    # --- appends --------------------------------------------------------------------------------------
    def append_batch(self, events: Sequence[Event], tier: "AckTier | str") -> list["AppendOutcome | StoreError"]:
        """See :meth:`LogStore.append_batch`. Acknowledged after the quorum commit.

        Raises:
            TierNotOfferedError: ``tier`` is not QUORUM. QuorumUnavailableError: no majority
                acknowledged (nothing of this call is acknowledged; it may commit later).
            StoreError: a member is not an Event; the state kept changing under concurrent
                writers (retry).
        """
        tier = self.check_tier(tier)
        events = check_events(events)
        self._writable()
        out: list[AppendOutcome | StoreError] = []
        chunk: list[Event] = []
        size = 0
        for ev in events:             # transactions bounded by count and by encoded bytes
            n = etcd_encoded_bytes(len(ev.canonical))
            if chunk and (len(chunk) >= ETCD_TXN_EVENTS_MAX or size + n > ETCD_TXN_BYTES_MAX):
                out += self._append_chunk(chunk, tier)
                chunk, size = [], 0
            chunk.append(ev)
            size += n
        if chunk:
            out += self._append_chunk(chunk, tier)
        return out

    def _append_chunk(self, events: list[Event], tier: AckTier) -> list["AppendOutcome | StoreError"]:
        c = self.client
        for _ in range(ETCD_TXN_TRIES_MAX):
            tids = {e.trajectory_id for e in events}
            heads, fences, refs = self._state(tids, [e.event_id for e in events])
            read_heads, read_fences = dict(heads), dict(fences)
            out: list[AppendOutcome | StoreError] = []
            puts, new_ids = [], []
            batch_ids: dict[str, Event] = {}
            for ev in events:
                t = ev.trajectory_id
                existing = refs.get(ev.event_id)
                if existing is None and ev.event_id in batch_ids:
                    prior = batch_ids[ev.event_id]
                    existing = StoredRef(prior.trajectory_id, prior.sequence_number, prior.digest)
                try:
                    if ev.owner_epoch > MAX_OWNER_EPOCH or ev.sequence_number > MAX_OWNER_EPOCH:
                        raise StoreError(f"event {ev.event_id}: owner_epoch and sequence_number must be < 2**63")
                    if check_append(ev, existing, None, heads[t], fences[t]):
                        out.append(AppendOutcome(ev.event_id, existing.trajectory_id, existing.sequence_number,
                                                 tier, True))
                        continue
                except StoreError as exc:
                    out.append(exc)
                    continue
                heads[t] = ev.sequence_number
                fences[t] = max(fences[t], ev.owner_epoch)
                batch_ids[ev.event_id] = ev
                new_ids.append(ev.event_id)
                puts.append(c.op_put(self._ev_key(t, ev.sequence_number), ev.canonical))
                puts.append(c.op_put(self._k("id", urllib.parse.quote(ev.event_id, safe="")),
                                     f"{t}\n{ev.sequence_number}\n{ev.digest}".encode()))
                out.append(AppendOutcome(ev.event_id, t, ev.sequence_number, tier))
            if not puts:
                return out
            compare = []
            for t in tids:
                for name, before, after in (("head", read_heads[t], heads[t]), ("fence", read_fences[t], fences[t])):
                    key = self._k("t", self._t(t), name)
                    compare.append(c.cmp_value(key, "EQUAL", _num(before)) if before else c.cmp_missing(key))
                    if after != before:
                        puts.append(c.op_put(key, _num(after)))
                if heads[t] != read_heads[t] and not read_heads[t]:
                    puts.append(c.op_put(self._k("tl", self._t(t)), b""))
            compare += [c.cmp_missing(self._k("id", urllib.parse.quote(i, safe=""))) for i in new_ids]
            resp = c.txn(compare, puts, idempotent=True)   # the comparisons make a re-send harmless
            if resp.get("succeeded"):
                return out
        raise StoreError(f"etcd append: the log kept changing under concurrent writers ({ETCD_TXN_TRIES_MAX} tries); "
                         "nothing of the last try was applied, retry")

    # --- fences ---------------------------------------------------------------------------------------
    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        """See :meth:`LogStore.install_fence` (a compare-and-set on the fence key)."""
        check_fence_args(trajectory_id, owner_epoch)
        self._writable()
        key = self._k("t", self._t(trajectory_id), "fence")
        for _ in range(ETCD_TXN_TRIES_MAX):
            cur = self.fence(trajectory_id)
            check_fence_not_older(trajectory_id, owner_epoch, cur)
            if owner_epoch == cur:
                return
            cmp = self.client.cmp_value(key, "EQUAL", _num(cur)) if cur else self.client.cmp_missing(key)
            if self.client.txn([cmp], [self.client.op_put(key, _num(owner_epoch))], idempotent=True).get("succeeded"):
                return
        raise StoreError(f"install_fence on {trajectory_id!r}: the fence kept changing; retry")

    def claim_epoch(self, trajectory_id: str, owner_epoch: "int | None" = None) -> int:
        """See :meth:`LogStore.claim_epoch`: one compare-and-set on the fence key, so two
        claimants (threads, processes or hosts) never get the same epoch."""
        check_claim_args(trajectory_id, owner_epoch)
        self._writable()
        key = self._k("t", self._t(trajectory_id), "fence")
        for _ in range(ETCD_TXN_TRIES_MAX):
            cur = self.fence(trajectory_id)
            epoch = next_claimed_epoch(trajectory_id, owner_epoch, cur)
            cmp = self.client.cmp_value(key, "EQUAL", _num(cur)) if cur else self.client.cmp_missing(key)
            if self.client.txn([cmp], [self.client.op_put(key, _num(epoch))], idempotent=True).get("succeeded"):
                return epoch
            if owner_epoch is not None:
                continue      # re-read: next_claimed_epoch raises StaleOwnerError if we lost
        raise StoreError(f"claim_epoch on {trajectory_id!r}: the fence kept changing; retry")

    def fence(self, trajectory_id: str) -> int:
        self._open()
        v = self.client.get_value(self._k("t", self._t(trajectory_id), "fence"))
        return int(v) if v else 0

    # --- reads ----------------------------------------------------------------------------------------
    def head(self, trajectory_id: str) -> int:
        self._open()
        v = self.client.get_value(self._k("t", self._t(trajectory_id), "head"))
        return int(v) if v else 0

    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        """Events ``start..stop`` (linearizable range reads, in pages of 1000).

        Raises:
            CorruptLogError: a position below the head is missing, or stored bytes are not the
                event their key says. StoreError: bad bounds. QuorumUnavailableError.
        """
        lo, hi = read_bounds(start, stop)
        self._open()
        head = self.head(trajectory_id)
        hi = head if hi is None else min(hi, head)
        if hi < lo:
            return iter(())
        return self._pages(trajectory_id, lo, hi)

    def _pages(self, t: str, lo: int, hi: int) -> Iterator[Event]:
        pos = lo
        while pos <= hi:
            kvs = self.client.range_prefix(self._k("t", self._t(t), "e", ""), start=self._ev_key(t, pos),
                                           end=self._ev_key(t, hi + 1), limit=1000)
            if not kvs:
                raise CorruptLogError(f"etcd log {t!r}: no event at #{pos} although the head is #{hi}")
            for kv in kvs:
                body = unb64(kv.get("value"))
                ev = decode_stored(body)
                if (ev.trajectory_id, ev.sequence_number) != (t, pos) or digest(body) != ev.digest:
                    raise CorruptLogError(f"etcd log {t!r}: key for #{pos} holds {ev.trajectory_id!r}#"
                                          f"{ev.sequence_number}: a gap or an altered key")
                yield ev
                pos += 1

    def trajectories(self) -> list[str]:
        self._open()
        p = self._k("tl", "")
        return sorted(urllib.parse.unquote(unb64(kv["key"])[len(p):].decode())
                      for kv in self.client.range_prefix(p, keys_only=True))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.client.close()


def open_etcd_store(path: "str | Sequence[str]", *, read_only: bool = False, **kw) -> EtcdStore:
    """``open_store("etcd", urls, ...)``: the opener this module provides to :mod:`kernel_lib.log`
    (entry point ``kernel_lib.stores: etcd``; also registered when this module is imported)."""
    return EtcdStore.open(str(path) if not isinstance(path, (list, tuple)) else path, read_only=read_only, **kw)


register_store_kind("etcd", open_etcd_store)
