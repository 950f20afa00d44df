"""The storage engine contract of §11.8: what the bytes under a trajectory must do for retention.

==========================  =====================================================================
module                      what it holds
==========================  =====================================================================
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
:mod:`.crash`               every crash state of payload-first vs reference-first logging
==========================  =====================================================================

The log stores themselves implement the two primitives this package builds on: semantic
deduplication at append (:func:`kernel_lib.log.base.check_append`: an identical retry is
acknowledged, a conflicting one raises) and prefix retirement
(:meth:`kernel_lib.log.base.LogStore.retire_prefix`, SQLite and memory stores).
"""

from .backpressure import BoundedStore, StallStats
from .compaction import (CollectionReport, CompactionPlan, CompactionReport, checkpoint_objects, collect_garbage,
                         compact, plan_compaction, track_checkpoint)
from .payloads import MigrationReport, PayloadRef, PayloadStore, referenced_digests
from .references import HOLD_PURPOSES, SECONDS_PER_MONTH, Hold, Reference, ReferenceIndex
from .replica import FollowerReplica, ReceiveReport

# crash-state exploration of payload ordering: kernel_lib.storage_engine.crash (imported on use)

__all__ = [
    "BoundedStore", "StallStats", "CollectionReport", "CompactionPlan", "CompactionReport", "checkpoint_objects",
    "collect_garbage", "compact", "plan_compaction", "track_checkpoint", "MigrationReport", "PayloadRef",
    "PayloadStore", "referenced_digests", "HOLD_PURPOSES", "SECONDS_PER_MONTH", "Hold", "Reference",
    "ReferenceIndex", "FollowerReplica", "ReceiveReport",
]
