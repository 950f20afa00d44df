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

import os

from kernel_lib.errors import StoreError
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
from kernel_lib.log.group_commit import AsyncGroupCommitter, GroupAck, GroupCommitter
from kernel_lib.log.memory import MemoryStore
from kernel_lib.log.segment import SegmentStore
from kernel_lib.log.sqlite import SQLiteStore
from kernel_lib.log.trajectory import TrajectoryLog, default_event_id

STORE_KINDS = ("sqlite", "segment", "memory", "etcd")


def open_store(kind: str = "sqlite", path: str | os.PathLike | None = None, *, read_only: bool = False,
               **kw) -> LogStore:
    """Open a store by kind. ``path`` is the SQLite file, the segment directory, or for ``etcd``
    the members' client URLs, comma-separated (:class:`kernel_lib.quorum.EtcdStore`).

    Args:
        kind: one of :data:`STORE_KINDS`.
        path: the SQLite file or segment-log directory (not used for ``memory``).
        read_only: open without changing anything on disk and without needing write permission
            (:class:`SQLiteStore` / :class:`~kernel_lib.log.segment.SegmentStore`): a torn segment
            tail is reported in ``store.recovery`` (see :meth:`RecoveryReport.notes`), not trimmed;
            appends and fences raise StoreReadOnlyError.
        kw: passed to the store's ``open`` (e.g. ``busy_timeout_s``, ``segment_bytes``, ``fs``).

    Raises:
        StoreError: an unknown kind, a missing path, ``read_only`` for the memory store (it has
            nothing to read), or the store's own open errors (e.g. not a kernel_lib log).
    """
    if kind == "memory":
        if read_only:
            raise StoreError("a memory store cannot be opened read-only: it starts empty, there is nothing to read")
        return MemoryStore()
    if path is None:
        raise StoreError(f"store kind {kind!r} needs a path")
    if kind == "sqlite":
        return SQLiteStore.open(path, read_only=read_only, **kw)
    if kind == "segment":
        return SegmentStore.open(path, read_only=read_only, **kw)
    if kind == "etcd":      # path: the members' client URLs, comma-separated (kernel_lib.quorum)
        from kernel_lib.quorum.store import EtcdStore
        return EtcdStore.open(str(path), read_only=read_only, **kw)
    raise StoreError(f"unknown store kind {kind!r}; choose one of {list(STORE_KINDS)}")


__all__ = [
    "AckTier", "AppendOutcome", "FailureDomain", "LogStore", "RecoveryReport", "StoredRef",
    "check_append", "check_events", "check_fence_args", "choose_tier", "parse_tier", "read_bounds",
    "MAX_OWNER_EPOCH", "AsyncGroupCommitter", "GroupAck", "GroupCommitter", "MemoryStore", "SegmentStore", "SQLiteStore",
    "TrajectoryLog", "default_event_id", "open_store", "STORE_KINDS",
]
