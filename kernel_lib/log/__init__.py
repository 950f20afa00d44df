"""Log stores behind one interface, acknowledgment tiers, group commit (§11.2–11.3, §11.8.4).

``open_store(kind, path)`` opens one of the three stores:

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

import os

from ..errors import StoreError
from .base import (AckTier, AppendOutcome, FailureDomain, LogStore, RecoveryReport, StoredRef,
                   check_append, choose_tier)
from .group_commit import AsyncGroupCommitter, GroupAck, GroupCommitter
from .memory import MemoryStore
from .sqlite import SQLiteStore
from .trajectory import TrajectoryLog, default_event_id

STORE_KINDS = ("sqlite", "segment", "memory")


def open_store(kind: str = "sqlite", path: str | os.PathLike | None = None, **kw) -> LogStore:
    """Open a store by kind. ``path`` is the SQLite file or the segment directory.

    Raises StoreError for an unknown kind or a missing path.
    """
    if kind == "memory":
        return MemoryStore()
    if path is None:
        raise StoreError(f"store kind {kind!r} needs a path")
    if kind == "sqlite":
        return SQLiteStore.open(path, **kw)
    if kind == "segment":
        from .segment import SegmentStore
        return SegmentStore.open(path, **kw)
    raise StoreError(f"unknown store kind {kind!r}; choose one of {list(STORE_KINDS)}")


__all__ = [
    "AckTier", "AppendOutcome", "FailureDomain", "LogStore", "RecoveryReport", "StoredRef",
    "check_append", "choose_tier", "AsyncGroupCommitter", "GroupAck", "GroupCommitter", "MemoryStore", "SQLiteStore",
    "TrajectoryLog", "default_event_id", "open_store", "STORE_KINDS",
]
