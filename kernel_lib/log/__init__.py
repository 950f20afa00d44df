"""Log stores behind one interface, acknowledgment tiers, group commit (§11.2–11.3, §11.8.4).

``open_store(kind, path, read_only=False)`` opens one of the three stores (``read_only=True``
inspects a durable log without changing anything on disk):

==========  ======================================  =========================================
kind        what it is                              tiers (failure domain survived)
==========  ======================================  =========================================
memory      a list in this process                  memory (nothing)
segment     the project's framed, CRC32C segment    write (process crash), fdatasync (host
            files                                   crash, volume intact)
sqlite      embedded SQLite in WAL mode (default)   write (process crash), fdatasync (host
                                                    crash, volume intact)
==========  ======================================  =========================================
"""

from __future__ import annotations

from kernel_lib.log.base import (
    MAX_OWNER_EPOCH,
    AckTier,
    AppendOutcome,
    FailureDomain,
    LogStore,
    RecoveryReport,
    StoredRef,
    check_append,
    check_events,
    check_fence_args,
    choose_tier,
    parse_tier,
    read_bounds,
)
from kernel_lib.log.group_commit import AsyncGroupCommitter, GroupAck, GroupCommitter, LeaderGroupCommitter
from kernel_lib.log.memory import MemoryStore
from kernel_lib.log.segment import SegmentStore
from kernel_lib.log.sqlite import SQLiteStore
from kernel_lib.log.trajectory import TrajectoryLog, default_event_id

from kernel_lib.log.stores import STORE_ENTRY_POINTS, STORE_KINDS, open_store, register_store_kind
from kernel_lib.log.files import JSONL_SUFFIXES, load_events

__all__ = [
    "AckTier", "AppendOutcome", "FailureDomain", "LogStore", "RecoveryReport", "StoredRef",
    "check_append", "check_events", "check_fence_args", "choose_tier", "parse_tier", "read_bounds",
    "MAX_OWNER_EPOCH", "AsyncGroupCommitter", "GroupAck", "GroupCommitter", "LeaderGroupCommitter", "MemoryStore",
    "SegmentStore", "SQLiteStore",
    "TrajectoryLog", "default_event_id", "open_store", "STORE_KINDS", "STORE_ENTRY_POINTS", "register_store_kind",
    "JSONL_SUFFIXES", "load_events",
]
