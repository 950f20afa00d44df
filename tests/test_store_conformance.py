"""The store conformance suite (:mod:`kernel_lib.log.conformance`) on every store: memory,
SQLite, segment and etcd (§11.3.1 table 2, §11.5.1, §11.8.3, §11.8.4).

Fault model / invariant: each check states one clause of the append contract, the tier
declaration, fencing and claiming, durability across reopen, read-only opening, close and log
compaction; every store must satisfy every check its declared capabilities make applicable. The
etcd part runs on one real three-member cluster for the module (``-m quorum``), each check under
its own key prefix. The last part proves every check can fail: for each one, a store broken in
exactly the way the check describes is reported as failing it.
"""

from __future__ import annotations

import functools
import os
import tempfile
import uuid
from pathlib import Path

import pytest

from kernel_lib.errors import ConfigError, ConflictingDuplicateError, SequenceGapError, StaleOwnerError, StoreError
from kernel_lib.log import AckTier, LogStore, MemoryStore, SegmentStore, SQLiteStore, parse_tier
from kernel_lib.log.conformance import CHECKS, StoreCapabilities, check_names, run_check, run_conformance

LOCAL_KINDS = ("memory", "sqlite", "segment", "segment_preallocated")
#: What each local store offers beyond what it declares itself (how its log can be opened).
HARNESS = {
    "memory": {},
    "sqlite": {"read_only_open": True, "concurrent_handles": True, "multi_process": True},
    "segment": {"read_only_open": True},      # one writer per directory: no second handle
    "segment_preallocated": {"read_only_open": True},
}
#: ``segment_preallocated``: the segment store preallocating from its first record, 512 bytes
#: at most at a time, so that every check's short log runs over zeros written ahead of its end.
SMALL_PREALLOCATION = {"preallocate_bytes": 512, "preallocate_from_bytes": 0}


def _memory_opener():
    store = MemoryStore()

    def opener(read_only: bool = False) -> LogStore:
        if read_only:
            raise StoreError("a memory store cannot be opened read-only")
        return store
    return opener


def local_opener(kind: str, root: Path):
    """An opener for a fresh log of ``kind`` under ``root`` (picklable for the durable kinds)."""
    if kind == "memory":
        return _memory_opener()
    if kind == "sqlite":
        return functools.partial(SQLiteStore.open, str(root / "log.sqlite"), create=True)
    if kind == "segment_preallocated":
        return functools.partial(SegmentStore.open, str(root / "seglog"), create=True, **SMALL_PREALLOCATION)
    return functools.partial(SegmentStore.open, str(root / "seglog"), create=True)


def _local_capabilities(kind: str) -> StoreCapabilities:
    with tempfile.TemporaryDirectory(prefix="kl-conformance-") as d:
        probe = local_opener(kind, Path(d))()
        try:
            return StoreCapabilities.of(probe, **HARNESS[kind])
        finally:
            probe.close()


CAPS = {kind: _local_capabilities(kind) for kind in LOCAL_KINDS}
LOCAL_CASES = [(kind, name) for kind in LOCAL_KINDS for name in check_names(CAPS[kind])]


def test_the_local_stores_declare_what_they_offer():
    m, q, s = CAPS["memory"], CAPS["sqlite"], CAPS["segment"]
    assert (m.tiers, m.durable, m.reopen) == ((AckTier.MEMORY,), False, False)
    assert m.retire_prefix and m.claim_epoch
    assert q.tiers == s.tiers == (AckTier.WRITE, AckTier.FDATASYNC) and q.durable and s.durable and q.reopen
    assert q.retire_prefix and not s.retire_prefix and q.claim_epoch and s.claim_epoch
    assert q.multi_process and not s.concurrent_handles
    with pytest.raises(ConfigError):
        m.but(reopen=True)                 # a memory log survives no handle
    with pytest.raises(ConfigError):
        s.but(multi_process=True)          # other processes need a second handle


def test_every_check_is_registered_with_a_doc_and_runs_on_some_local_store():
    assert len(CHECKS) >= 20 and all(c.doc for c in CHECKS.values())
    covered = {name for _, name in LOCAL_CASES} | {"a_store_without_atomic_claims_says_so"}   # see the next test
    assert set(CHECKS) - covered == set(), "a check applies to no local store"
    with pytest.raises(ConfigError):
        run_check("no_such_check", _memory_opener(), CAPS["memory"])
    with pytest.raises(ConfigError, match="does not apply"):
        run_check("everything_survives_close_and_reopen", _memory_opener(), CAPS["memory"])


@pytest.mark.parametrize("kind,check", LOCAL_CASES, ids=[f"{k}-{c}" for k, c in LOCAL_CASES])
def test_local_store_conforms(kind, check, tmp_path):
    run_check(check, local_opener(kind, tmp_path), CAPS[kind])


def test_a_store_that_keeps_the_default_claim_epoch_conforms_as_one_without_atomic_claims():
    """A user's store that does not implement claim_epoch (LogStore's default refuses) is
    declared without it and passes every check that then applies."""
    class WithoutClaims(Delegating):
        claim_epoch = LogStore.claim_epoch

    def new_log():
        opener = _memory_opener()
        return lambda read_only=False: WithoutClaims(opener(read_only))
    caps = StoreCapabilities.of(new_log()())
    assert not caps.claim_epoch and caps.retire_prefix
    outcomes = run_conformance(new_log, caps)
    assert [o for o in outcomes if o.status == "failed"] == []
    assert {o.name for o in outcomes if o.status == "passed"} >= {"a_store_without_atomic_claims_says_so",
                                                                  "a_stale_owner_is_fenced_at_the_log"}


def test_run_conformance_reports_every_check_of_a_store(tmp_path):
    counter = iter(range(1000))
    outcomes = run_conformance(lambda: local_opener("segment", tmp_path / f"log{next(counter)}"), CAPS["segment"],
                               only=["identical_retry_is_acknowledged_without_a_second_copy",
                                     "retire_prefix_keeps_the_suffix_head_fence_and_ids",
                                     "a_store_that_cannot_compact_says_so"])
    assert [o.status for o in outcomes] == ["passed", "not_applicable", "passed"]
    assert "retire_prefix" in outcomes[1].message
    with pytest.raises(ConfigError):
        run_conformance(lambda: _memory_opener(), CAPS["memory"], only=["nope"])


# --- etcd: one real three-member cluster for the module ---------------------------------------------

def _etcd_capabilities(store) -> StoreCapabilities:
    return StoreCapabilities.of(store, reopen=True, read_only_open=True, concurrent_handles=True, multi_process=True)


def _predicted_etcd_capabilities() -> StoreCapabilities:
    """What the etcd store declares by its class (for choosing the checks at collection time; the
    fixture compares it with what the live store declares)."""
    from kernel_lib.quorum.store import EtcdStore
    return StoreCapabilities(kind=EtcdStore.name, tiers=tuple(EtcdStore.offered_tiers), durable=True,
                             retire_prefix=EtcdStore.retire_prefix is not LogStore.retire_prefix,
                             claim_epoch=EtcdStore.claim_epoch is not LogStore.claim_epoch, reopen=True,
                             read_only_open=True, concurrent_handles=True, multi_process=True)


ETCD_CAPS = _predicted_etcd_capabilities()
ETCD_CHECKS = check_names(ETCD_CAPS)


@pytest.fixture(scope="module")
def etcd_endpoints():
    from kernel_lib.quorum import EtcdCluster, EtcdStore
    with EtcdCluster(3) as cluster:
        endpoints = ",".join(cluster.endpoints())
        probe = EtcdStore.open(endpoints, prefix=f"conformance-probe/{uuid.uuid4().hex}/")
        try:
            live = _etcd_capabilities(probe)
        finally:
            probe.close()
        assert live == ETCD_CAPS and live.declaration["members"] == 3
        yield endpoints


@pytest.mark.quorum
@pytest.mark.parametrize("check", ETCD_CHECKS)
def test_etcd_store_conforms(check, etcd_endpoints):
    from kernel_lib.quorum.store import EtcdStore
    opener = functools.partial(EtcdStore.open, etcd_endpoints, prefix=f"conformance/{uuid.uuid4().hex}/",
                               timeout_s=10.0)
    probe = opener()
    try:
        caps = _etcd_capabilities(probe)      # with the live declaration (members, tolerated losses)
    finally:
        probe.close()
    run_check(check, opener, caps)


# --- every check can fail ------------------------------------------------------------------------------

class Delegating(LogStore):
    """A store that forwards everything to ``inner``; the broken stores below override one thing."""

    def __init__(self, inner: LogStore):
        self.inner = inner
        self.name, self.offered_tiers = inner.name, inner.offered_tiers
        self.recovery, self.read_only = inner.recovery, inner.read_only

    def append_batch(self, events, tier):
        return self.inner.append_batch(events, tier)

    def read(self, trajectory_id, start=1, stop=None):
        return self.inner.read(trajectory_id, start, stop)

    def head(self, trajectory_id):
        return self.inner.head(trajectory_id)

    def fence(self, trajectory_id):
        return self.inner.fence(trajectory_id)

    def install_fence(self, trajectory_id, owner_epoch):
        return self.inner.install_fence(trajectory_id, owner_epoch)

    def claim_epoch(self, trajectory_id, owner_epoch=None):
        return self.inner.claim_epoch(trajectory_id, owner_epoch)

    def retired_through(self, trajectory_id):
        return self.inner.retired_through(trajectory_id)

    def retire_prefix(self, trajectory_id, through, *, checkpoint_event_id):
        return self.inner.retire_prefix(trajectory_id, through, checkpoint_event_id=checkpoint_event_id)

    def trajectories(self):
        return self.inner.trajectories()

    def close(self):
        self.inner.close()


class ClaimsMoreTiers(Delegating):
    def __init__(self, inner):
        super().__init__(inner)
        self.offered_tiers = (AckTier.MEMORY,) + tuple(inner.offered_tiers)


class AnyTierGoes(Delegating):
    def append_batch(self, events, tier):
        try:
            parse_tier(tier)
        except StoreError:
            tier = self.inner.strongest_tier()
        return self.inner.append_batch(events, tier)


class NeverSaysDuplicate(Delegating):
    def append_batch(self, events, tier):
        out = self.inner.append_batch(events, tier)
        return [type(o)(o.event_id, o.trajectory_id, o.sequence_number, o.tier, False)
                if not isinstance(o, Exception) else o for o in out]


class Swallows(Delegating):
    """Reports the refusals of one kind as acknowledgments (the event is silently dropped)."""

    swallowed: type[StoreError] = StoreError

    def append_batch(self, events, tier):
        events = list(events)
        out = self.inner.append_batch(events, tier)
        return [_ack(e, tier) if isinstance(o, self.swallowed) else o for e, o in zip(events, out)]


def _ack(event, tier):
    from kernel_lib.log import AppendOutcome
    return AppendOutcome(event.event_id, event.trajectory_id, event.sequence_number, parse_tier(tier))


class SwallowsConflicts(Swallows):
    swallowed = ConflictingDuplicateError


class SwallowsGaps(Swallows):
    swallowed = SequenceGapError


class IgnoresFences(Delegating):
    def install_fence(self, trajectory_id, owner_epoch):
        return None


class StopsAtTheFirstRefusal(Delegating):
    def append_batch(self, events, tier):
        out = []
        for e in events:
            (o,) = self.inner.append_batch([e], tier)
            out.append(o)
            if isinstance(o, Exception):
                break
        return out


class DropsWhatIsNotAnEvent(Delegating):
    def append_batch(self, events, tier):
        from kernel_lib.core.events import Event
        return self.inner.append_batch([e for e in events if isinstance(e, Event)], tier)


class ReadsToTheHead(Delegating):
    def read(self, trajectory_id, start=1, stop=None):
        return self.inner.read(trajectory_id, start, None)


class ListsUnsorted(Delegating):
    def trajectories(self):
        return sorted(self.inner.trajectories(), reverse=True)


class LaxFenceArguments(Delegating):
    def install_fence(self, trajectory_id, owner_epoch):
        try:
            return self.inner.install_fence(trajectory_id, owner_epoch)
        except StaleOwnerError:
            raise
        except StoreError:
            return None


class NaiveClaims(Delegating):
    """Claims by reading the fence and installing it in two steps (the race the checks catch)."""

    def claim_epoch(self, trajectory_id, owner_epoch=None):
        epoch = owner_epoch or self.fence(trajectory_id) + 1
        self.install_fence(trajectory_id, epoch)
        return epoch


class CloseDoesNothing(Delegating):
    def close(self):
        return None


class PretendsToCompact(Delegating):
    def retire_prefix(self, trajectory_id, through, *, checkpoint_event_id):
        return through


class Forgetful:
    """An opener that opens a new, empty SQLite log on every call (nothing survives a reopen)."""

    def __init__(self, root: Path):
        self.root, self.n = root, 0

    def __call__(self, read_only: bool = False) -> LogStore:
        self.n += 1
        return SQLiteStore.open(self.root / f"log{self.n}.sqlite", read_only=read_only, create=True)


class IgnoresReadOnly:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, read_only: bool = False) -> LogStore:
        return SQLiteStore.open(self.path, create=True)


class OneLogPerProcess:
    """A picklable opener whose handles in other processes open another log each."""

    def __init__(self, path: str, parent_pid: int):
        self.path, self.parent_pid = path, parent_pid

    def __call__(self, read_only: bool = False) -> LogStore:
        pid = os.getpid()
        return SQLiteStore.open(self.path if pid == self.parent_pid else f"{self.path}.{pid}", read_only=read_only,
                                create=True)


def _wrapped(kind: str, wrapper):
    def new_log(root: Path):
        inner = local_opener(kind, root)
        return lambda read_only=False: wrapper(inner(read_only=True) if read_only else inner())
    return new_log


#: check -> (capabilities to declare, new_log(root) -> opener of a store broken the way the check describes)
BREAKAGES = {
    "declared_tiers_match_the_store": ("sqlite", _wrapped("sqlite", ClaimsMoreTiers)),
    "tiers_given_as_labels_are_parsed": ("memory", _wrapped("memory", AnyTierGoes)),
    "identical_retry_is_acknowledged_without_a_second_copy": ("sqlite", _wrapped("sqlite", NeverSaysDuplicate)),
    "conflicting_duplicate_is_refused_and_nothing_is_overwritten": ("memory", _wrapped("memory", SwallowsConflicts)),
    "sequence_numbers_are_gapless": ("segment", _wrapped("segment", SwallowsGaps)),
    "a_stale_owner_is_fenced_at_the_log": ("memory", _wrapped("memory", IgnoresFences)),
    "batch_outcomes_are_decided_per_event": ("memory", _wrapped("memory", StopsAtTheFirstRefusal)),
    "mixed_batches_decide_every_event": ("sqlite", _wrapped("sqlite", NeverSaysDuplicate)),
    "non_event_batch_members_are_refused_up_front": ("memory", _wrapped("memory", DropsWhatIsNotAnEvent)),
    "read_ranges_mean_the_same_in_every_store": ("memory", _wrapped("memory", ReadsToTheHead)),
    "trajectories_are_independent_and_listed_sorted": ("memory", _wrapped("memory", ListsUnsorted)),
    "install_fence_arguments_are_checked": ("memory", _wrapped("memory", LaxFenceArguments)),
    "claim_epoch_installs_a_strictly_newer_epoch": ("memory", _wrapped("memory", NaiveClaims)),
    "a_store_without_atomic_claims_says_so": ("segment-without-claims", _wrapped("segment", NaiveClaims)),
    "two_claimants_never_share_an_epoch": ("memory", _wrapped("memory", NaiveClaims)),
    "claims_from_several_processes_hand_out_each_epoch_once":
        ("sqlite", lambda root: OneLogPerProcess(str(root / "log.sqlite"), os.getpid())),
    "everything_survives_close_and_reopen": ("sqlite", Forgetful),
    "a_read_only_handle_reads_everything_and_refuses_writes":
        ("sqlite", lambda root: IgnoresReadOnly(root / "l.sqlite")),
    "claim_epoch_is_durable_and_refused_read_only": ("sqlite", lambda root: IgnoresReadOnly(root / "l.sqlite")),
    "every_operation_after_close_raises_store_closed": ("memory", _wrapped("memory", CloseDoesNothing)),
    "retire_prefix_keeps_the_suffix_head_fence_and_ids": ("sqlite", _wrapped("sqlite", PretendsToCompact)),
    "a_store_that_cannot_compact_says_so": ("memory-without-compaction", _wrapped("memory", Delegating)),
    "the_contract_matches_a_model_under_random_operations": ("memory", _wrapped("memory", IgnoresFences)),
}


def _declared(name: str) -> StoreCapabilities:
    if name == "segment-without-claims":
        return CAPS["segment"].but(claim_epoch=False)
    if name == "memory-without-compaction":
        return CAPS["memory"].but(retire_prefix=False)
    return CAPS[name]


def test_every_check_has_a_store_that_breaks_it():
    assert set(BREAKAGES) == set(CHECKS)


@pytest.mark.parametrize("check", list(BREAKAGES))
def test_a_store_broken_the_way_a_check_describes_fails_it(check, tmp_path):
    caps_name, new_log = BREAKAGES[check]
    caps = _declared(caps_name)
    assert CHECKS[check].applies(caps) is None
    (outcome,) = run_conformance(lambda: new_log(tmp_path), caps, only=[check])
    assert outcome.status == "failed", f"{check} passed on a store broken the way it describes"
    assert outcome.message.startswith("store "), f"{check} failed by accident, not by its assertion: {outcome.message}"
