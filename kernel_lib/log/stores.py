"""Opening a log store by kind (``memory``, ``sqlite``, ``segment``, or a kind a higher layer
registers, such as ``etcd`` from :mod:`kernel_lib.quorum`)."""

from __future__ import annotations

import os
from typing import Callable

from kernel_lib.errors import StoreError
from kernel_lib.log.base import LogStore
from kernel_lib.log.memory import MemoryStore
from kernel_lib.log.segment import SegmentStore
from kernel_lib.log.sqlite import SQLiteStore

__all__ = ["STORE_KINDS", "STORE_ENTRY_POINTS", "register_store_kind", "open_store"]


STORE_KINDS = ("sqlite", "segment", "memory", "etcd")

#: Entry-point group through which a higher layer (or a user's package) provides a store kind:
#: ``name = "module:opener"`` with ``opener(path, *, read_only=False, **kw) -> LogStore``. The
#: ``etcd`` kind comes from :mod:`kernel_lib.quorum` this way, so this layer never imports it.
STORE_ENTRY_POINTS = "kernel_lib.stores"

_OPENERS: dict[str, Callable[..., LogStore]] = {}


def register_store_kind(kind: str, opener: Callable[..., LogStore]) -> None:
    """Make ``open_store(kind, path, ...)`` call ``opener(path, read_only=..., **kw)``.

    Raises: StoreError: ``kind`` is a built-in kind (memory, sqlite, segment) or not a name."""
    if not isinstance(kind, str) or not kind.isidentifier() or kind in ("memory", "sqlite", "segment"):
        raise StoreError(f"cannot register store kind {kind!r}: not a name, or a built-in kind")
    _OPENERS[kind] = opener


def _provided_opener(kind: str) -> Callable[..., LogStore] | None:
    if kind in _OPENERS:
        return _OPENERS[kind]
    from importlib.metadata import entry_points
    for ep in entry_points(group=STORE_ENTRY_POINTS, name=kind):
        _OPENERS[kind] = ep.load()
        return _OPENERS[kind]
    return None


def open_store(kind: str = "sqlite", path: str | os.PathLike | None = None, *, read_only: bool = False,
               create: bool = False, **kw) -> LogStore:
    """Open a store by kind. ``path`` is the SQLite file, the segment directory, or for ``etcd``
    the members' client URLs, comma-separated (:class:`kernel_lib.quorum.EtcdStore`).

    Args:
        kind: one of :data:`STORE_KINDS`.
        path: the SQLite file or segment-log directory (not used for ``memory``).
        read_only: open without changing anything on disk and without needing write permission
            (:class:`SQLiteStore` / :class:`~kernel_lib.log.segment.SegmentStore`): a torn segment
            tail is reported in ``store.recovery`` (see :meth:`RecoveryReport.notes`), not trimmed;
            appends and fences raise StoreReadOnlyError.
        create: for ``sqlite`` and ``segment`` opened read-write: start a new, empty log if
            ``path`` does not exist. Without it a missing path raises LogNotFoundError: a missing
            log is not an empty one. Ignored by ``memory`` (always new) and by provided kinds such
            as ``etcd`` (not passed on).
        kw: passed to the store's ``open`` (e.g. ``busy_timeout_s``, ``segment_bytes``, ``fs``).

    Raises:
        LogNotFoundError: ``path`` does not exist and ``create`` is false (sqlite, segment).
        StoreError: an unknown kind, no path given, ``read_only`` for the memory store (it has
            nothing to read), or the store's own open errors (e.g. not a kernel_lib log).
    """
    if kind == "memory":
        if read_only:
            raise StoreError("a memory store cannot be opened read-only: it starts empty, there is nothing to read")
        return MemoryStore()
    if path is None:
        raise StoreError(f"store kind {kind!r} needs a path")
    if kind == "sqlite":
        return SQLiteStore.open(path, read_only=read_only, create=create, **kw)
    if kind == "segment":
        return SegmentStore.open(path, read_only=read_only, create=create, **kw)
    opener = _provided_opener(kind) if isinstance(kind, str) else None
    if opener is not None:     # e.g. etcd: path holds the members' client URLs, comma-separated
        return opener(path, read_only=read_only, **kw)
    if kind in STORE_KINDS:   # a kind a higher layer provides, not registered in this process
        raise StoreError(f"store kind {kind!r} is provided by kernel_lib.quorum, which is not registered here: "
                         "install the package (pip install -e .; its entry points register the kind) or "
                         "import kernel_lib.quorum before opening the store")
    raise StoreError(f"unknown store kind {kind!r}; choose one of {list(STORE_KINDS)}")
