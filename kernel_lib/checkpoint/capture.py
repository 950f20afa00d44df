"""Capture, publish, consolidate and retire checkpoints (§11.4.1, §11.4.2, eq. 3, table 4).

:class:`Checkpointer` captures one trajectory's checkpoints at quiet boundaries:

1. **freeze** (the pause): take the record's stored fields (:meth:`TrajectoryRecord.state_dict`)
   and read the workspace into a content-addressed tree (file bytes held in memory). The record
   must be at the log's head, and if the log names a workspace tree (a ``WorkspaceChanged``
   event), the workspace read must be that tree; otherwise the pair would be torn and nothing
   is captured.
2. **serialize**: a full checkpoint encodes the complete record snapshot (binary,
   ``record-snapshot/4``: :mod:`kernel_lib.checkpoint.state`) and tree object; an incremental
   one encodes a record delta and a workspace delta against the previous published checkpoint
   (its base), plus the digest of the complete record snapshot, so restore can check what the
   chain rebuilds. An incremental checkpoint (and a consolidation) keeps the record format of
   its chain's full base, so a chain an older build began in JSON goes on in JSON. The base's
   chain must still be in the blob store (checked before each incremental capture; if it is
   not, the log's newest checkpoint is read again, and without an intact base no delta is
   written). The manifest records the digest of the event
   at p, which binds it to this log.
3. **make durable**: every new object (file blobs, snapshot or deltas, manifest) is written to
   the blob store, which returns only when they are durable.
4. **publish**: append the ``Checkpoint`` (schema 2) event naming the manifest's digest. Only now
   can recovery use it; a crash before this leaves the previous checkpoint in force, and the
   unreferenced objects are harmless garbage.

:meth:`Checkpointer.consolidate` writes a full base that replaces a delta chain (same covered
position, published by its own event); :meth:`Checkpointer.retire` lists, and with
``delete=True`` removes, the superseded deltas' manifests and record deltas, and refuses to do
so unless the new base is in the log with all its objects intact; objects a checkpoint published
later still needs are kept. Workspace deltas and file blobs are never retired here: being
content-addressed, the same bytes may be named by a ``WorkspaceChanged`` event or by another
trajectory, and their lifetime belongs to retention with reference tracking (§11.8.2).

:func:`log_workspace_change` records a workspace change between captures; it refuses a base
that is not the tree the log holds (:func:`log_tree`), since every later position would then
fail to fold.

Every capture returns its cost figures (table 4): bytes and objects written, the state size a
self-contained full copy would hold, and the pause, serialize, write and publish times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

from kernel_lib.errors import CheckpointError, ConfigError, UnrecoverableStateError
from kernel_lib.core.events import CheckpointV2, Event, WorkspaceChanged
from kernel_lib.log.base import LogStore
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.core.record import TrajectoryRecord
from kernel_lib.checkpoint.blobs import BlobStore, is_digest, sha256_hex
from kernel_lib.checkpoint.manifest import CheckpointManifest, versions_for
from kernel_lib.checkpoint.retired import Tombstone, write_tombstones
from kernel_lib._support.checks import check_unix_s
from kernel_lib.limits import CHECKPOINT_SCAN_WINDOW_MAX
from kernel_lib.checkpoint.restore import (
    SCAN_WINDOW,
    LoadedCheckpoint,
    check_binding,
    covers_an_earlier_position,
    find_checkpoint,
    load_checkpoint,
)
from kernel_lib.checkpoint.state import (
    DELTA_FORMAT_OF,
    RECORD_FORMAT,
    diff_state,
    encode_record_delta,
    record_digest,
    state_of,
)
from kernel_lib.checkpoint.tree import EMPTY_TREE, Tree, WorkspaceDelta, WorkspaceSource, diff_trees, read_workspace

CaptureKind = Literal["full", "incremental", "auto"]


@dataclass
class CaptureResult:
    """One published checkpoint and what it cost.

    Sizes in bytes: ``bytes_written`` (new objects actually written, after deduplication),
    ``record_bytes`` (the record snapshot or delta written for it), ``workspace_bytes`` (tree or
    workspace delta object), ``file_bytes_written`` (new file blobs), ``state_bytes`` (complete
    record snapshot + every file of the tree: what a self-contained copy of the state holds).
    Times in seconds: ``pause_s`` (freeze), ``serialize_s``, ``write_s`` (durable writes),
    ``publish_s`` (log append), ``total_s``. ``chain_length``: deltas back to the full base.
    """

    checkpoint_id: str
    kind: str
    covered_sequence_number: int
    manifest_sha256: str
    event: Event
    chain_length: int
    tree_sha256: str | None
    record_sha256: str
    bytes_written: int
    objects_written: int
    record_bytes: int
    workspace_bytes: int
    file_bytes_written: int
    state_bytes: int
    pause_s: float
    serialize_s: float
    write_s: float
    publish_s: float
    total_s: float

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "event"} | {"event_sequence_number":
                                                                            self.event.sequence_number}


@dataclass
class ConsolidationResult:
    """A new full base replacing a delta chain: its capture, the checkpoint ids it supersedes,
    and the digests of the objects only those used (retirable once the base is published)."""

    capture: CaptureResult
    supersedes: list[str]
    retirable: list[str]


@dataclass
class RetireReport:
    """What :meth:`Checkpointer.retire` did: objects found retirable, those deleted, bytes freed,
    and those ``kept`` because a checkpoint published later in the log still needs them."""

    base_checkpoint_id: str
    retirable: list[str]
    deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    kept: list[str] = field(default_factory=list)


@dataclass
class WorkspaceChangeResult:
    """One logged workspace change: the event, the new tree and delta, bytes and objects written,
    and its times in seconds (``scan_s``, ``write_s``, ``publish_s``)."""

    event: Event
    tree: Tree
    delta: WorkspaceDelta
    bytes_written: int
    objects_written: int
    scan_s: float
    write_s: float
    publish_s: float


@dataclass
class _Published:
    manifest_sha256: str
    manifest: CheckpointManifest
    state: dict[str, Any]
    tree: Tree | None
    chain: list[tuple[str, CheckpointManifest]]


def store_tree(blobs: BlobStore, workspace: WorkspaceSource, *, ignore: Iterable[str] = ()) -> Tree:
    """Put a workspace's file blobs and its tree object in ``blobs`` (durable on return) and
    return the tree, e.g. to register an immutable snapshot such as ``ws_r18`` once.

    Raises CheckpointError if the workspace cannot be read as a tree."""
    tree, datas = read_workspace(workspace, blobs, ignore=ignore)
    blobs.put_many([*datas.values(), tree.canonical])
    return tree


def log_tree(store: LogStore, trajectory_id: str) -> tuple[str | None, str]:
    """The workspace tree the log holds at its head, and where it says so: the result of the last
    ``WorkspaceChanged`` event, or, when a ``Checkpoint`` event with a workspace comes after it
    (or there is none), that checkpoint's tree. ``(None, "")`` when the log names no tree.

    Reads the log backwards in growing windows up to the first such event."""
    hi, window = store.head(trajectory_id), SCAN_WINDOW
    while hi >= 1:
        lo = max(1, hi - window + 1)
        for ev in reversed(list(store.read(trajectory_id, lo, hi))):
            p = ev.payload
            if isinstance(p, WorkspaceChanged):
                return p.result_tree_sha256, f"workspace change {p.change_id} at position {ev.sequence_number}"
            if (isinstance(p, CheckpointV2) and p.workspace_tree_sha256 is not None
                    and covers_an_earlier_position(ev)):
                return p.workspace_tree_sha256, f"checkpoint {p.checkpoint_id} at position {ev.sequence_number}"
        hi, window = lo - 1, min(window * 2, CHECKPOINT_SCAN_WINDOW_MAX)
    return None, ""


def log_workspace_change(log: TrajectoryLog, blobs: BlobStore, base: Tree, workspace: WorkspaceSource, *,
                         operation_id: str | None = None, change_id: str | None = None,
                         ignore: Iterable[str] = ()) -> WorkspaceChangeResult | None:
    """Record that the workspace went from tree ``base`` to the current ``workspace`` (§11.4.1).

    ``base`` must be the tree the log holds now (:func:`log_tree`: its last workspace change, or
    the newest checkpoint's tree); when the log names none yet, every file blob of ``base`` must
    be stored. The new file blobs, the delta and both tree objects are made durable first; then
    a ``WorkspaceChanged`` event naming them is appended. Returns None (and logs nothing) when
    the workspace did not change.

    Raises:
        CheckpointError: ``base`` is not the log's current tree (a stale base would make every
            later position unfoldable), or its blobs are not stored; the workspace cannot be
            read as a tree. Nothing is appended then.
        StoreError subclasses: the append was refused (nothing names the new objects then).
    """
    t0 = time.perf_counter()
    if not isinstance(base, Tree):
        raise CheckpointError(f"the base of a workspace change is a Tree, not {type(base).__name__}")
    current, where = log_tree(log.store, log.trajectory_id)
    if current is not None and current != base.sha256:
        raise CheckpointError(f"stale base refused: the workspace change starts from tree {base.sha256[:12]}…, but "
                              f"the log's workspace is tree {current[:12]}… ({where}); nothing was logged")
    if current is None:
        absent = [p for p, e in base.files.items() if not blobs.exists(e.sha256)]
        if absent:
            raise CheckpointError(f"the base tree {base.sha256[:12]}… names {len(absent)} file(s) whose blobs are "
                                  f"not stored, e.g. {absent[:3]}; store it first (store_tree); nothing was logged")
    tree, datas = read_workspace(workspace, blobs, ignore=ignore)
    delta = diff_trees(base, tree)
    if not delta.changes:
        return None
    t1 = time.perf_counter()
    need = set(delta.new_blobs())
    put = blobs.put_many([d for k, d in datas.items() if k in need] + [base.canonical, tree.canonical,
                                                                       delta.canonical])
    t2 = time.perf_counter()
    c = delta.counts()
    ev = log.append(WorkspaceChanged(
        change_id=change_id or f"wsc-{log.head + 1}-{delta.sha256[:12]}", base_tree_sha256=base.sha256,
        result_tree_sha256=tree.sha256, delta_sha256=delta.sha256, operation_id=operation_id,
        files_written=c["write"], files_deleted=c["delete"], mode_changes=c["mode"]))
    t3 = time.perf_counter()
    return WorkspaceChangeResult(ev, tree, delta, put.bytes_written, put.objects_written, t1 - t0, t2 - t1, t3 - t2)


class Checkpointer:
    """Captures and publishes the checkpoints of the trajectory behind ``log``.

    Args:
        log: the trajectory's log handle; checkpoints are published by appending through it.
        blobs: where every checkpoint object goes (shared across trajectories).
        max_chain: with ``kind="auto"``, the longest delta chain before a full snapshot is taken.
        ignore: file/directory names skipped when reading a directory workspace.

    The live record a caller keeps (e.g. a :class:`~kernel_lib.gate.dispatch.DispatchGate`'s) does
    not yet hold the ``Checkpoint`` event a capture appends; fold ``result.event`` into it.
    """

    def __init__(self, log: TrajectoryLog, blobs: BlobStore, *, max_chain: int = 8, ignore: Iterable[str] = ()):
        if type(max_chain) is not int or max_chain < 0:
            raise ConfigError(f"max_chain must be an integer >= 0, got {max_chain!r}")
        self.log, self.blobs, self.max_chain = log, blobs, max_chain
        self.ignore = tuple(ignore)
        self._last: _Published | None = None
        self._loaded = False

    # --- the latest published checkpoint ---------------------------------------------------------
    def _latest(self) -> _Published | None:
        if not self._loaded:
            store, tid = self.log.store, self.log.trajectory_id
            ev, window = find_checkpoint(store, tid, store.head(tid))
            last = None
            if ev is not None:
                lc: LoadedCheckpoint = load_checkpoint(self.blobs, ev.payload.manifest_sha256, trajectory_id=tid,
                                                       expect=ev.payload)
                check_binding(store, tid, lc.manifest, lc.manifest_sha256, events=window)
                last = _Published(lc.manifest_sha256, lc.manifest, lc.state, lc.tree, lc.chain)
            self._last, self._loaded = last, True
        return self._last

    @property
    def latest(self) -> CheckpointManifest | None:
        """Manifest of the newest checkpoint published in the log (read from it on first use, then
        the newest this checkpointer published).

        Raises UnrecoverableStateError if that checkpoint's objects are missing or damaged, or it
        does not belong to this log."""
        last = self._latest()
        return last.manifest if last else None

    def _lost(self, base: _Published) -> list[str]:
        """Objects of ``base``'s chain (manifests, record snapshot and deltas, tree and workspace
        deltas) no longer present in the blob store: a stat each, no hashing."""
        out = []
        for d, m in base.chain:
            for obj in (d, m.record.get("snapshot") or m.record.get("delta"),
                        *(() if m.workspace is None else (m.workspace.get("tree") or m.workspace.get("delta"),))):
                if obj and not self.blobs.exists(obj):
                    out.append(obj)
        return out

    def _base(self, kind: str) -> _Published | None:
        """The base for a ``kind`` capture (None: capture a full one). The base is the newest
        checkpoint this checkpointer knows; if any object of its chain has gone from the blob
        store (retired by another checkpointer, collected, lost), the log is read again for its
        newest checkpoint, which must be intact and bound to this log. ``incremental`` without
        such a base raises CheckpointError; ``auto`` falls back to a full capture."""
        if kind == "full":
            return None
        base, why = None, ""
        for _ in range(2):
            try:
                base = self._latest()
            except UnrecoverableStateError as exc:
                base, why = None, f"the newest Checkpoint event of the log cannot be used: {exc}"
                break
            if base is None:
                why = "the log holds no published checkpoint"
                break
            lost = self._lost(base)
            if not lost:
                break
            why = (f"checkpoint {base.manifest.checkpoint_id}'s chain lost {len(lost)} object(s) from the blob store "
                   f"{self.blobs.name}, e.g. {lost[0][:16]}…")
            base = None
            self._last, self._loaded = None, False      # read the log's newest checkpoint again
        if base is None and kind == "incremental":
            raise CheckpointError(f"no intact published checkpoint of {self.log.trajectory_id!r} to be the base of an "
                                  f"incremental one ({why}); capture a full checkpoint (kind='full' or 'auto')")
        if kind == "auto" and base is not None and base.manifest.chain_length >= self.max_chain:
            base = None
        return base

    # --- capture ---------------------------------------------------------------------------------
    def capture(self, record: TrajectoryRecord, workspace: WorkspaceSource | None = None, *,
                kind: CaptureKind = "auto", artifact_refs: Sequence[str] = ()) -> CaptureResult:
        """Capture and publish a checkpoint of ``record`` and ``workspace`` at the record's position.

        Args:
            record: the trajectory record folded up to the log's head.
            workspace: a directory, in-memory files or a stored :class:`Tree` (None: none).
            kind: ``full``, ``incremental`` (needs an intact published base), or ``auto``
                (incremental while the chain is shorter than ``max_chain`` and its base is intact,
                full otherwise). Before building on its cached base, the capture checks that
                every object of the base's chain is still stored, and if not reads the log's
                newest checkpoint again; it never publishes a delta against a missing base.
            artifact_refs: digests of objects restore must find intact (already in ``blobs``).

        Raises:
            CheckpointError: the record is not at the log's head or belongs to another
                trajectory; the workspace is not the tree the log names, cannot be read, or is
                missing while the base has one; an artifact is not stored; ``incremental``
                without an intact published base of this log; a blob cannot be stored.
            StoreError subclasses: publication was refused (nothing was published).
        """
        t0 = time.perf_counter()
        tid = self.log.trajectory_id
        if record.trajectory_id != tid:
            raise CheckpointError(f"record of {record.trajectory_id!r} given to the checkpointer of {tid!r}")
        if record.last_sequence_number != self.log.head:
            raise CheckpointError(f"the record is at position {record.last_sequence_number} but the log is at "
                                  f"{self.log.head}: a checkpoint is captured at a quiet boundary, with the record "
                                  "folded up to the log's head")
        if kind not in ("full", "incremental", "auto"):
            raise CheckpointError(f"kind must be full, incremental or auto, not {kind!r}")
        bad = [a for a in artifact_refs if not is_digest(a) or not self.blobs.has(a)]
        if bad:
            raise CheckpointError(f"required artifact(s) not stored intact in {self.blobs.name}: {bad[:3]}")
        # 1. freeze (the state of record-snapshot/2 to /4; a chain begun in format 1 takes its own below)
        state = state_of(record, RECORD_FORMAT)
        tree, datas = (read_workspace(workspace, self.blobs, ignore=self.ignore) if workspace is not None
                       else (None, {}))
        if record.workspace_tree_sha256 is not None and (tree is None or tree.sha256 != record.workspace_tree_sha256):
            raise CheckpointError(
                f"torn checkpoint refused: the log says the workspace is tree {record.workspace_tree_sha256[:12]}… at "
                f"position {record.last_sequence_number}, but the workspace given is "
                f"{tree.sha256[:12] + '…' if tree is not None else 'none'}")
        t1 = time.perf_counter()
        # 2. serialize
        base = self._base(kind)
        if base is not None and base.tree is not None and tree is None:
            raise CheckpointError("the base checkpoint has a workspace and this capture has none")
        fmt = RECORD_FORMAT if base is None else base.manifest.record_format   # a chain keeps its base's format
        if fmt != RECORD_FORMAT:
            state = state_of(record, fmt)
        record_sha, record_data = record_digest(state, format=fmt)
        objects: list[bytes] = []
        if base is None:
            kind_now, chain_length = "full", 0
            rec_part = {"sha256": record_sha, "size": len(record_data), "snapshot": record_sha, "delta": None}
            objects.append(record_data)
            record_bytes = len(record_data)
            ws_part = None
            workspace_bytes = 0
            if tree is not None:
                ws_part = {"tree_sha256": tree.sha256, "files": len(tree), "bytes": tree.total_bytes,
                           "tree": tree.sha256, "delta": None}
                objects.append(tree.canonical)
                workspace_bytes = len(tree.canonical)
            file_blobs = list(datas.values())
            base_ref = None
        else:
            kind_now, chain_length = "incremental", base.manifest.chain_length + 1
            delta_data = encode_record_delta(base.manifest.record_sha256, record_sha,
                                             diff_state(base.state, state, format=fmt), format=DELTA_FORMAT_OF[fmt])
            objects.append(delta_data)
            record_bytes = len(delta_data)
            rec_part = {"sha256": record_sha, "size": len(record_data), "snapshot": None,
                        "delta": sha256_hex(delta_data)}
            ws_part = None
            workspace_bytes = 0
            file_blobs = []
            if tree is not None:
                wdelta = diff_trees(base.tree or EMPTY_TREE, tree)
                objects.append(wdelta.canonical)
                workspace_bytes = len(wdelta.canonical)
                ws_part = {"tree_sha256": tree.sha256, "files": len(tree), "bytes": tree.total_bytes,
                           "tree": None, "delta": wdelta.sha256}
                need = set(wdelta.new_blobs())
                file_blobs = [d for k, d in datas.items() if k in need]
            base_ref = {"checkpoint_id": base.manifest.checkpoint_id, "manifest_sha256": base.manifest_sha256}
        manifest = self._manifest(record, kind_now, rec_part, ws_part, base_ref, chain_length, artifact_refs, (),
                                  fmt)
        t2 = time.perf_counter()
        # 3. durable, then 4. publish
        put_files = self.blobs.put_many(file_blobs)
        put_rest = self.blobs.put_many(objects + [manifest.canonical])
        t3 = time.perf_counter()
        ev = self._publish(manifest, ())
        t4 = time.perf_counter()
        chain = (base.chain if base is not None else []) + [(manifest.sha256, manifest)]
        self._last = _Published(manifest.sha256, manifest, state, tree, chain)
        self._loaded = True
        return CaptureResult(
            checkpoint_id=manifest.checkpoint_id, kind=kind_now,
            covered_sequence_number=manifest.covered_sequence_number,
            manifest_sha256=manifest.sha256, event=ev, chain_length=chain_length,
            tree_sha256=tree.sha256 if tree is not None else None, record_sha256=record_sha,
            bytes_written=put_files.bytes_written + put_rest.bytes_written,
            objects_written=put_files.objects_written + put_rest.objects_written,
            record_bytes=record_bytes, workspace_bytes=workspace_bytes, file_bytes_written=put_files.bytes_written,
            state_bytes=len(record_data) + (tree.total_bytes if tree is not None else 0),
            pause_s=t1 - t0, serialize_s=t2 - t1, write_s=t3 - t2, publish_s=t4 - t3, total_s=t4 - t0)

    def _manifest(self, record_or_state: TrajectoryRecord | dict, kind: str, rec_part: dict, ws_part: dict | None,
                  base_ref: dict | None, chain_length: int, artifacts: Sequence[str],
                  supersedes: Sequence[str], record_format: str) -> CheckpointManifest:
        if isinstance(record_or_state, TrajectoryRecord):
            p, prefix = record_or_state.last_sequence_number, record_or_state.prefix_sha256
        else:
            p, prefix = record_or_state["last_sequence_number"], record_or_state["prefix_sha256"]
        covered_event = None
        if p > 0:
            found = list(self.log.store.read(self.log.trajectory_id, p, p))
            if not found:
                raise CheckpointError(f"the log of {self.log.trajectory_id!r} has no event at position {p} to bind "
                                      "the checkpoint to")
            covered_event = found[0].digest
        tag = sha256_hex("|".join([rec_part["sha256"], (ws_part or {}).get("tree_sha256") or "-",
                                   (base_ref or {}).get("manifest_sha256") or "-", ",".join(supersedes)]).encode())
        return CheckpointManifest(
            checkpoint_id=f"ckpt-{p}-{kind}-{tag[:12]}", trajectory_id=self.log.trajectory_id,
            covered_sequence_number=p, prefix_sha256=prefix, kind=kind, record=rec_part, workspace=ws_part,
            base=base_ref, chain_length=chain_length, artifacts=tuple(artifacts), supersedes=tuple(supersedes),
            versions=versions_for(record_format), covered_event_sha256=covered_event)

    def _publish(self, manifest: CheckpointManifest, supersedes: Sequence[str]) -> Event:
        return self.log.append(CheckpointV2(
            checkpoint_id=manifest.checkpoint_id, covered_sequence_number=manifest.covered_sequence_number,
            manifest_sha256=manifest.sha256, kind=manifest.kind,
            base_checkpoint_id=manifest.base["checkpoint_id"] if manifest.base else None,
            record_sha256=manifest.record_sha256, workspace_tree_sha256=manifest.tree_sha256,
            artifact_refs=list(manifest.artifacts), supersedes=list(supersedes)))

    # --- consolidation ---------------------------------------------------------------------------
    def consolidate(self) -> ConsolidationResult | None:
        """Replace the delta chain of the newest checkpoint with a full base at the same covered
        position, published by its own ``Checkpoint`` event (§11.4.2). Returns None when the
        newest checkpoint is already full (or there is none).

        Nothing is deleted here: pass the result to :meth:`retire` once you want the superseded
        deltas gone. Raises as :meth:`capture` and UnrecoverableStateError if the chain is damaged.
        """
        last = self._latest()
        if last is None or last.manifest.kind == "full":
            return None
        t0 = time.perf_counter()
        state, tree = last.state, last.tree
        fmt = last.manifest.record_format     # the new base keeps the chain's format, and so its record digest
        record_sha, record_data = record_digest(state, format=fmt)
        if record_sha != last.manifest.record_sha256:
            raise CheckpointError(f"the chain of {last.manifest.checkpoint_id} rebuilds a record that hashes to "
                                  f"{record_sha[:12]}…, not {last.manifest.record_sha256[:12]}…")
        rec_part = {"sha256": record_sha, "size": len(record_data), "snapshot": record_sha, "delta": None}
        objects = [record_data]
        ws_part = None
        if tree is not None:
            ws_part = {"tree_sha256": tree.sha256, "files": len(tree), "bytes": tree.total_bytes,
                       "tree": tree.sha256, "delta": None}
            objects.append(tree.canonical)
        superseded = [(d, m) for d, m in last.chain if m.kind == "incremental"]
        supersedes = [m.checkpoint_id for _, m in superseded]
        manifest = self._manifest(state, "full", rec_part, ws_part, None, 0, last.manifest.artifacts, supersedes,
                                  fmt)
        t1 = time.perf_counter()
        put = self.blobs.put_many(objects + [manifest.canonical])
        t2 = time.perf_counter()
        ev = self._publish(manifest, supersedes)
        t3 = time.perf_counter()
        self._last = _Published(manifest.sha256, manifest, state, tree, [(manifest.sha256, manifest)])
        self._loaded = True
        # only objects private to this trajectory's superseded checkpoints: their manifests and
        # record deltas (both name this trajectory's record digests). Workspace deltas and file
        # blobs are content-addressed and may also be named by WorkspaceChanged events or by
        # other trajectories, so they stay (their reclamation needs reference tracking, §11.8.2).
        keep = set(manifest.objects()) | {manifest.sha256}
        retirable: list[str] = []
        for d, m in superseded:
            for obj in (d, m.record.get("delta")):
                if obj and obj not in keep and obj not in retirable:
                    retirable.append(obj)
        has_tree = tree is not None
        cap = CaptureResult(
            checkpoint_id=manifest.checkpoint_id, kind="full", covered_sequence_number=manifest.covered_sequence_number,
            manifest_sha256=manifest.sha256, event=ev, chain_length=0, tree_sha256=tree.sha256 if has_tree else None,
            record_sha256=record_sha, bytes_written=put.bytes_written, objects_written=put.objects_written,
            record_bytes=len(record_data), workspace_bytes=len(tree.canonical) if has_tree else 0, file_bytes_written=0,
            state_bytes=len(record_data) + (tree.total_bytes if has_tree else 0), pause_s=0.0, serialize_s=t1 - t0,
            write_s=t2 - t1, publish_s=t3 - t2, total_s=t3 - t0)
        return ConsolidationResult(cap, supersedes, retirable)

    def retire(self, consolidation: ConsolidationResult, *, delete: bool = False, retired_by: str = "consolidation",
               now_unix_s: float | None = None) -> RetireReport:
        """Retire the deltas a consolidated base superseded: list them, and with ``delete=True``
        remove them from the blob store.

        With ``delete=True``, one :class:`~kernel_lib.checkpoint.retired.Tombstone` per retired
        checkpoint is made durable first (``retired_by``, ``now_unix_s``: who retires and when,
        Unix seconds from the caller's clock, default now), so a later restore at its position
        says it was retired and falls back instead of reporting a missing manifest.

        Refuses (CheckpointError, nothing removed) unless the base's ``Checkpoint`` event is in
        the log at its position with the same bytes, and the base's manifest, record snapshot,
        tree and file blobs are all stored intact. Objects still needed by a checkpoint the log
        publishes after the base (or covering a later position) — e.g. a delta a stale writer
        built on a superseded one — are kept and listed in ``kept``. After retirement, restoring
        a position whose newest checkpoint was one of the superseded deltas fails with
        UnrecoverableStateError (keep them if audits need that history, §11.4.2).

        Raises ConfigError for an empty ``retired_by`` or a bad ``now_unix_s``.
        """
        if not isinstance(retired_by, str) or not retired_by:
            raise ConfigError(f"retired_by must be a non-empty string, got {retired_by!r}")
        now = time.time() if now_unix_s is None else check_unix_s("now_unix_s", now_unix_s)
        cap = consolidation.capture
        seq = cap.event.sequence_number
        found = list(self.log.store.read(self.log.trajectory_id, seq, seq))
        if not found or found[0].digest != cap.event.digest:
            raise CheckpointError(f"consolidated base {cap.checkpoint_id} is not published at position {seq} of the "
                                  "log; nothing retired")
        lc = load_checkpoint(self.blobs, cap.manifest_sha256, trajectory_id=self.log.trajectory_id,
                             expect=cap.event.payload)
        if lc.tree is not None:
            absent = [p for p, e in lc.tree.files.items() if not self.blobs.has(e.sha256)]
            if absent:
                raise CheckpointError(f"consolidated base {cap.checkpoint_id} lacks file blobs {absent[:3]}; "
                                      "nothing retired")
        needed = self._needed_later(cap)
        report = RetireReport(cap.checkpoint_id, list(consolidation.retirable))
        report.kept = [d for d in consolidation.retirable if d in needed]
        if delete:
            gone = [d for d in consolidation.retirable if d not in needed]
            write_tombstones(self.blobs, self._tombstones(gone, cap.checkpoint_id, retired_by, now))
            for d in gone:
                size = self.blobs.size(d) or 0
                if self.blobs.delete(d):
                    report.deleted.append(d)
                    report.bytes_freed += size
        return report

    def _tombstones(self, gone: list[str], replaced_by: str, retired_by: str, now: float) -> list[Tombstone]:
        """One tombstone per superseded manifest among ``gone`` (read before anything goes)."""
        out = []
        for d in gone:
            try:
                m = CheckpointManifest.from_bytes(self.blobs.get(d, kind="checkpoint manifest"), name=d[:16])
            except UnrecoverableStateError:
                continue     # a record delta (or an object already gone): named by its manifest's tombstone
            objs = tuple(o for o in (d, m.record.get("delta")) if o and o in gone)
            out.append(Tombstone(m.trajectory_id, m.checkpoint_id, d, m.covered_sequence_number, objs, retired_by,
                                 now, replaced_by))
        return out

    def _needed_later(self, cap: CaptureResult) -> set[str]:
        """Objects of the chains of every checkpoint the log publishes after ``cap``'s event, or
        covering a position after ``cap``'s covered position (other than ``cap`` itself)."""
        store, tid = self.log.store, self.log.trajectory_id
        needed: set[str] = set()
        for ev in store.read(tid, cap.covered_sequence_number + 1):
            if not isinstance(ev.payload, CheckpointV2) or ev.sequence_number == cap.event.sequence_number:
                continue
            p: CheckpointV2 = ev.payload
            if not covers_an_earlier_position(ev):
                continue
            if (ev.sequence_number < cap.event.sequence_number
                    and p.covered_sequence_number <= cap.covered_sequence_number):
                continue      # one of the checkpoints the base consolidated
            digest, seen = p.manifest_sha256, set()
            while digest not in seen:     # its chain, as far as it is still readable
                seen.add(digest)
                needed.add(digest)
                try:
                    m = CheckpointManifest.from_bytes(self.blobs.get(digest, kind="checkpoint manifest"),
                                                      name=digest[:16])
                except UnrecoverableStateError:
                    break
                needed.update(m.objects())
                if m.base is None:
                    break
                digest = m.base["manifest_sha256"]
        return needed
