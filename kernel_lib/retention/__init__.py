"""``retention``: retention lifetimes and their price, and the storage-engine contract (§11.8).

==========================  =====================================================================
module                      what it holds
==========================  =====================================================================
:mod:`.pricing`             bytes per artifact class, their storage bill, the promises a policy
                            keeps (§11.8.1–11.8.2, Napkin Math 11.2, exercise 7)
:mod:`.references`          :class:`ReferenceIndex`: which trajectory needs which digest, under
                            which retention policy; declared holds (replay, audit, compliance)
:mod:`.payloads`            :class:`PayloadStore`: content-addressed payloads, durable before
                            any event references them; tenant-checked reads; cold-tier moves
:mod:`.compaction`          :func:`plan_compaction` / :func:`compact` (retire a log prefix only
                            behind an intact, durable checkpoint and no active hold);
                            :func:`collect_garbage` (delete bytes no trajectory references)
:mod:`.backpressure`        :class:`BoundedStore`: a full store stalls appends, never drops
:mod:`.replica`             :class:`FollowerReplica`: advertises only its gap-free prefix, keeps
                            the primary's provenance
==========================  =====================================================================

The log stores implement the two primitives this package builds on: semantic deduplication at
append (:func:`kernel_lib.log.base.check_append`) and prefix retirement
(:meth:`kernel_lib.log.base.LogStore.retire_prefix`). Every crash state of payload-first against
reference-first logging is explored by :mod:`kernel_lib.verify.payload_workload`.

May import: ``checkpoint``, ``log``, ``core`` and the leaves.
"""

from kernel_lib.retention.pricing import (
    BYTES_PER_KB, BYTES_PER_MB, BYTES_PER_GB, BYTES_PER_KIB, BYTES_PER_MIB, BYTES_PER_GIB, MONTHS_PER_YEAR,
    ARTIFACT_CLASSES, PROMISES, kb_to_bytes, mb_to_bytes, bytes_to_gb, bytes_to_gib, TrajectoryBytes,
    trajectory_bytes, storage_cost_usd, share_of_attempt, fleet_cost_usd, RetentionPolicy, full_retention,
    split_lifetimes, policy_cost_usd, Promise, PromiseVerdict, promises, promises_kept, NAPKIN_11_2_PRINTED,
    NAPKIN_11_2_HALF_UNIT, NapkinCheck, NapkinRetention, napkin_11_2
)
from kernel_lib.retention.references import (
    SECONDS_PER_MONTH, HOLD_PURPOSES, Hold, Reference, policy_to_json, policy_from_json, ReferenceIndex
)
from kernel_lib.retention.payloads import PayloadRef, MigrationReport, referenced_digests, PayloadStore
from kernel_lib.retention.compaction import (
    CompactionPlan, CompactionReport, CollectionReport, store_failure_domain, blob_failure_domain,
    checkpoint_objects, track_checkpoint, plan_compaction, compact, collect_garbage
)
from kernel_lib.retention.backpressure import StallStats, BoundedStore
from kernel_lib.retention.replica import ReceiveReport, FollowerReplica

__all__ = [
    "BYTES_PER_KB", "BYTES_PER_MB", "BYTES_PER_GB", "BYTES_PER_KIB", "BYTES_PER_MIB", "BYTES_PER_GIB",
    "MONTHS_PER_YEAR", "ARTIFACT_CLASSES", "PROMISES", "kb_to_bytes", "mb_to_bytes", "bytes_to_gb",
    "bytes_to_gib", "TrajectoryBytes", "trajectory_bytes", "storage_cost_usd", "share_of_attempt",
    "fleet_cost_usd", "RetentionPolicy", "full_retention", "split_lifetimes", "policy_cost_usd", "Promise",
    "PromiseVerdict", "promises", "promises_kept", "NAPKIN_11_2_PRINTED", "NAPKIN_11_2_HALF_UNIT",
    "NapkinCheck", "NapkinRetention", "napkin_11_2", "SECONDS_PER_MONTH", "HOLD_PURPOSES", "Hold",
    "Reference", "policy_to_json", "policy_from_json", "ReferenceIndex", "PayloadRef", "MigrationReport",
    "referenced_digests", "PayloadStore", "CompactionPlan", "CompactionReport", "CollectionReport",
    "store_failure_domain", "blob_failure_domain", "checkpoint_objects", "track_checkpoint",
    "plan_compaction", "compact", "collect_garbage", "StallStats", "BoundedStore", "ReceiveReport",
    "FollowerReplica"
]
