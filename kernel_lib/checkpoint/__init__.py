"""Checkpoints and snapshots (Durable Execution §11.4.1, §11.4.2; content addressing §11.8.2).

A checkpoint binds an exact committed log position p of one trajectory to a record snapshot, a
workspace snapshot (a content-addressed tree), the artifacts recovery needs, their SHA-256
digests, and the reducer and format versions that read them (:mod:`.manifest`). Its bytes are
made durable before the ``Checkpoint`` event that publishes it is appended, so a crash during a
capture leaves the previous checkpoint in force (:mod:`.capture`, checked by :mod:`.crash`).

==================  ===========================================================================
module              what it holds
==================  ===========================================================================
:mod:`.blobs`       content-addressed blob stores: :class:`DirectoryBlobStore` (real files,
                    through the :mod:`kernel_lib.log.fs` seam), :class:`MemoryBlobStore`
:mod:`.tree`        workspace trees (path → digest, size, executable flag), deltas, materialize
:mod:`.state`       record snapshots and record deltas
:mod:`.manifest`    the checkpoint manifest
:mod:`.capture`     :class:`Checkpointer` (full / incremental capture, consolidation, retirement),
                    :func:`log_workspace_change`, :func:`log_tree`, :func:`store_tree`
:mod:`.restore`     :func:`restore` (verify, bind to the log, rebuild at p, fold the suffix,
                    apply logged workspace deltas, materialize), :func:`load_checkpoint`,
                    :func:`check_binding`
:mod:`.retired`     tombstones of retired checkpoints (who, when); :func:`scan_trajectory` lists
                    a trajectory's manifests and tombstones in a blob store
:mod:`.index`       :class:`CheckpointIndex`, in-memory snapshots for time travel (the scrubber)
:mod:`.crash`       crash-state exploration of capture and publication
:mod:`.bench`       ``bench restore``: restore vs fold-from-start, fold throughput, scrubber
==================  ===========================================================================
"""

from kernel_lib.checkpoint.blobs import (
    BlobStats,
    BlobStore,
    DirectoryBlobStore,
    MemoryBlobStore,
    PutResult,
    sha256_hex,
)
from kernel_lib.checkpoint.capture import (
    CaptureResult,
    Checkpointer,
    ConsolidationResult,
    RetireReport,
    WorkspaceChangeResult,
    log_tree,
    log_workspace_change,
    store_tree,
)
from kernel_lib.checkpoint.index import CheckpointIndex
from kernel_lib.checkpoint.manifest import CheckpointManifest
from kernel_lib.checkpoint.restore import (
    LoadedCheckpoint,
    RestoreResult,
    check_binding,
    find_checkpoint,
    load_checkpoint,
    restore,
)
from kernel_lib.checkpoint.tree import (
    EMPTY_TREE,
    FileEntry,
    Tree,
    WorkspaceDelta,
    diff_trees,
    files_tree,
    load_delta,
    load_tree,
    materialize,
    scan_directory,
)

__all__ = [
    "BlobStats", "BlobStore", "DirectoryBlobStore", "MemoryBlobStore", "PutResult", "sha256_hex",
    "CaptureResult", "Checkpointer", "ConsolidationResult", "RetireReport", "WorkspaceChangeResult",
    "log_tree", "log_workspace_change", "store_tree", "CheckpointIndex", "CheckpointManifest", "LoadedCheckpoint",
    "RestoreResult", "check_binding", "find_checkpoint", "load_checkpoint", "restore", "EMPTY_TREE", "FileEntry",
    "Tree", "WorkspaceDelta", "diff_trees", "files_tree", "load_delta", "load_tree", "materialize", "scan_directory",
]
