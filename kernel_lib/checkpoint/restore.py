"""Restore the record and the workspace at a log position (§11.4.1, §11.5.2).

:func:`restore` is deterministic and offline: it reads the log and the blob store and nothing
else, and calls no model and no tool. Its steps:

1. find the newest published checkpoint at or before the target position t: the last
   ``Checkpoint`` (schema 2) event in the log at a position ≤ t whose covered position p lies
   before the event itself, found by reading the log backwards in growing windows (the events
   read are reused as part of the suffix). An event claiming to cover its own position or a
   later one cannot have been published by a capture of this log and is passed over;
2. read its manifest and, for an incremental one, every manifest of its chain back to a full
   base, verifying each object's SHA-256 as it is read, and check that the manifest is bound to
   this log: the digest of the event at p it records must be the digest of this log's event p
   (:func:`check_binding`). The record snapshot, the one large object, is the exception: its
   SHA-256 is computed in a background thread (:meth:`BlobStore.get_pending
   <kernel_lib.checkpoint.blobs.BlobStore.get_pending>`) while steps 3 and 4 decode it and fold
   the suffix into the record, and restore waits for that check before it goes on to the
   workspace (step 5) or returns. If the bytes turn out damaged, whatever else failed
   meanwhile, the restore is run again verifying as it reads, so the error (or the fallback to
   an older checkpoint) is the one a verified read gives;
3. rebuild the record at the covered position p (full snapshot, then each record delta, then a
   check of the resulting record's digest) and the tree at p (tree, then each workspace delta,
   each result checked against its tree id);
4. fold the log suffix p+1..t into the record, and apply every ``WorkspaceChanged`` delta of the
   suffix to the tree in log order (each must start from the tree the previous one produced).
   A later ``Checkpoint`` event in the suffix (when restore starts from an older checkpoint)
   that names a different tree for its covered position is honoured: its chain is loaded and
   verified, bound to this log, and its tree replaces the one carried so far; if the log's own
   workspace changes name another tree there, the two disagree and restore refuses;
5. check that the tree arrived at is the one the log says (the record's
   ``workspace_tree_sha256``), verify every file blob, and write the files into ``dest``.

Any object missing or damaged stops the restore with
:class:`~kernel_lib.errors.UnrecoverableStateError` naming it; a log position is never paired
with an older tree. With no checkpoint at or before t, the record is folded from record_0 and
the workspace is known only from the first logged workspace change on.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_lib._support.gc_pause import cyclic_gc_paused
from kernel_lib.errors import CheckpointRetiredError, ConfigError, UnrecoverableStateError
from kernel_lib.core.events import CheckpointV2, Event, WorkspaceChanged
from kernel_lib.log.base import LogStore
from kernel_lib.core.record import TrajectoryRecord, fold_into, initial_record
from kernel_lib.checkpoint.blobs import BlobStore, PendingCheck
from kernel_lib.checkpoint.manifest import CheckpointManifest
from kernel_lib.checkpoint.retired import Tombstone, TrajectoryObjects, scan_trajectory
from kernel_lib.checkpoint.state import (
    apply_state_delta,
    decode_record_delta,
    decode_record_state,
    record_digest,
    record_from_snapshot,
)
from kernel_lib.checkpoint.tree import EMPTY_TREE, Tree, load_delta, load_tree, materialize
from kernel_lib.limits import CHECKPOINT_CHAIN_LENGTH_MAX, CHECKPOINT_SCAN_WINDOW_MAX

#: First window (events) of the backward scan for a checkpoint; it doubles up to
#: :data:`kernel_lib.limits.CHECKPOINT_SCAN_WINDOW_MAX`.
SCAN_WINDOW = 256
#: :func:`find_checkpoint` keeps its window at :data:`SCAN_WINDOW` for this many windows before
#: doubling it: every event read before the checkpoint event is decoded for nothing, so within
#: 2 048 events of the target the scan decodes fewer than 256 events beyond what the suffix needs
#: (doubling from the start would decode up to as many again as the distance).
SCAN_STEADY_WINDOWS = 8


@dataclass
class LoadedCheckpoint:
    """A checkpoint read back and verified: its manifest (and digest), the record state (or, with
    ``as_record``, the record itself) and tree at its covered position, and its chain (manifest
    digest, manifest), oldest (the full base) first, this one last. ``state`` is in the layout of
    the chain's record format (``manifest.record_format``; :func:`~kernel_lib.checkpoint.state.state_of`):
    :meth:`TrajectoryRecord.state_dict` for format 2, ``snapshot_state`` (USD figures) for format 1."""

    manifest_sha256: str
    manifest: CheckpointManifest
    state: dict[str, Any] | None
    tree: Tree | None
    chain: list[tuple[str, CheckpointManifest]]
    bytes_read: int = 0
    record: TrajectoryRecord | None = None


@dataclass
class RestoreResult:
    """What :func:`restore` rebuilt.

    ``record`` is the trajectory record at ``target``; ``tree`` the workspace tree there (None:
    no workspace known); ``workspace_dir`` where its files were written (None if no ``dest``).
    ``checkpoint`` is the manifest used (None: folded from record_0), with ``chain_length`` deltas
    behind it. ``suffix_events`` were folded and ``workspace_changes`` applied after it.
    ``bytes_read`` counts blob-store bytes. ``timings_s`` (seconds): ``find``, ``load`` (manifests,
    record and tree with their deltas, digests checked; the record snapshot's own digest is
    checked in the background meanwhile), ``fold``, ``check_wait`` (what was left of that
    background check when the fold ended), ``workspace`` (logged deltas), ``materialize`` (blob
    checks and file writes) and ``total``.

    When the newest checkpoint at or before the target was retired (consolidated, §11.4.2),
    ``retired`` holds the tombstones met (who retired each checkpoint, and when), ``fallback``
    says in words what restore did instead, and ``fallback_to`` is ``"checkpoint <id>"`` (an
    older retained checkpoint) or ``"log"`` (folded from the log's start); all three are empty
    otherwise.
    """

    record: TrajectoryRecord
    target: int
    tree: Tree | None
    workspace_dir: Path | None
    checkpoint: CheckpointManifest | None
    checkpoint_manifest_sha256: str | None
    chain_length: int
    suffix_events: int
    workspace_changes: int
    bytes_read: int
    timings_s: dict[str, float] = field(default_factory=dict)
    retired: tuple[Tombstone, ...] = ()
    fallback: str | None = None
    fallback_to: str | None = None

    @property
    def tree_sha256(self) -> str | None:
        return None if self.tree is None else self.tree.sha256

    def to_dict(self) -> dict[str, Any]:
        """Summary as plain data (the record as ``to_dict``)."""
        return {"target": self.target, "checkpoint_id": self.checkpoint.checkpoint_id if self.checkpoint else None,
                "covered_sequence_number": self.checkpoint.covered_sequence_number if self.checkpoint else 0,
                "chain_length": self.chain_length, "suffix_events": self.suffix_events,
                "workspace_changes": self.workspace_changes, "tree_sha256": self.tree_sha256,
                "workspace_dir": str(self.workspace_dir) if self.workspace_dir else None,
                "bytes_read": self.bytes_read, "timings_s": dict(self.timings_s), "record": self.record.to_dict(),
                "retired": [t.to_json() for t in self.retired], "fallback": self.fallback,
                "fallback_to": self.fallback_to}


def is_published_checkpoint(ev: Event) -> bool:
    """True for a ``Checkpoint`` event this module can restore from (schema 2)."""
    return isinstance(ev.payload, CheckpointV2)


def covers_an_earlier_position(ev: Event) -> bool:
    """True if the ``Checkpoint`` event ``ev`` covers a position before its own (p < its
    sequence number), as every checkpoint a capture of this log publishes does."""
    return ev.payload.covered_sequence_number < ev.sequence_number


def find_checkpoint(store: LogStore, trajectory_id: str, target: int, *,
                    checkpoint_id: str | None = None) -> tuple[Event | None, list[Event]]:
    """The newest published ``Checkpoint`` event at a position ≤ ``target`` (or the one named
    ``checkpoint_id``), and the events read while looking for it (ascending, ending at
    ``target``; they start at or before the checkpoint event, or at 1 when none was found).

    A ``Checkpoint`` event whose covered position is not before its own position is passed over:
    no capture of this log can have published it (it was appended by hand or copied from another
    log), and the record it names is not a state of this log at or before ``target``.

    Reads the log backwards in windows of 256 events (doubling after the eighth), so the cost is
    proportional to the distance from the target back to the checkpoint, not to the log's
    length, and within 2 048 events fewer than 256 events are read beyond the checkpoint event.
    A compacted log is searched only in its retained suffix.

    Raises:
        UnrecoverableStateError: the event named ``checkpoint_id`` does not cover a position
            before its own.
    """
    chunks: list[list[Event]] = []
    hi, window = target, SCAN_WINDOW
    floor = store.retired_through(trajectory_id)   # log compaction (§11.8.3): positions <= floor are gone
    while hi > floor:
        if len(chunks) >= SCAN_STEADY_WINDOWS:
            window = min(window * 2, CHECKPOINT_SCAN_WINDOW_MAX)
        lo = max(floor + 1, hi - window + 1)
        chunk = list(store.read(trajectory_id, lo, hi))
        chunks.append(chunk)
        for ev in reversed(chunk):
            if not is_published_checkpoint(ev):
                continue
            if checkpoint_id is not None and ev.payload.checkpoint_id != checkpoint_id:
                continue
            if covers_an_earlier_position(ev):
                return ev, [e for c in reversed(chunks) for e in c]
            if checkpoint_id is not None:
                raise UnrecoverableStateError(
                    f"checkpoint {checkpoint_id} is published at position {ev.sequence_number} but claims to cover "
                    f"position {ev.payload.covered_sequence_number}: a checkpoint covers a position before its own "
                    "event, so this one is not a checkpoint of this log",
                    missing=[("checkpoint manifest", ev.payload.manifest_sha256)])
        hi = lo - 1
    return None, [e for c in reversed(chunks) for e in c]


def check_binding(store: LogStore, trajectory_id: str, manifest: CheckpointManifest, manifest_sha256: str, *,
                  events: list[Event] | None = None) -> None:
    """Check that ``manifest`` describes this log: the event at its covered position p is the one
    whose digest the manifest records (format 2). Reads event p alone (from ``events``, an
    ascending run of consecutive events, when it holds p).

    A format-1 manifest records no event digest; only its position and trajectory id are
    checked then.

    Raises:
        UnrecoverableStateError: the log has no event p, or its event p is not the one the
            manifest was captured after (the checkpoint belongs to another log).
    """
    p = manifest.covered_sequence_number
    if manifest.covered_event_sha256 is None:
        return
    ev = None
    if events and events[0].sequence_number <= p <= events[-1].sequence_number:
        ev = events[p - events[0].sequence_number]
        if ev.sequence_number != p:
            ev = None
    if ev is None:
        found = list(store.read(trajectory_id, p, p))
        ev = found[0] if found else None
    if ev is None or ev.digest != manifest.covered_event_sha256:
        got = "no event" if ev is None else f"event {ev.event_id} (digest {ev.digest[:12]}…)"
        raise UnrecoverableStateError(
            f"checkpoint {manifest.checkpoint_id} was captured after an event with digest "
            f"{manifest.covered_event_sha256[:12]}… at position {p}, but this log of {trajectory_id!r} has {got} "
            "there: the checkpoint belongs to another log and is not used",
            missing=[("checkpoint manifest", manifest_sha256)])


def load_chain(blobs: BlobStore, manifest_sha256: str, *, trajectory_id: str | None = None,
               expect: CheckpointV2 | None = None) -> list[tuple[str, CheckpointManifest]]:
    """The manifests of one checkpoint's chain as ``(manifest digest, manifest)``, the full base
    first and this checkpoint last, each verified and linked to the next.

    Raises UnrecoverableStateError as :func:`load_checkpoint` (manifests only)."""
    chain: list[tuple[str, CheckpointManifest]] = []
    digest, needed_by = manifest_sha256, "the Checkpoint event"
    while True:
        m = CheckpointManifest.from_bytes(blobs.get(digest, kind="checkpoint manifest", needed_by=needed_by),
                                          name=digest[:16])
        if trajectory_id is not None and m.trajectory_id != trajectory_id:
            raise UnrecoverableStateError(f"checkpoint manifest {digest[:16]}… belongs to {m.trajectory_id!r}, not "
                                          f"{trajectory_id!r}", missing=[("checkpoint manifest", digest)])
        if chain and (m.covered_sequence_number > chain[-1][1].covered_sequence_number
                      or m.checkpoint_id != chain[-1][1].base["checkpoint_id"]):
            raise UnrecoverableStateError(f"checkpoint {chain[-1][1].checkpoint_id} names base "
                                          f"{chain[-1][1].base['checkpoint_id']}, but its base manifest is "
                                          f"{m.checkpoint_id} at position {m.covered_sequence_number}",
                                          missing=[("checkpoint manifest", digest)])
        chain.append((digest, m))
        if m.kind == "full":
            break
        if len(chain) > CHECKPOINT_CHAIN_LENGTH_MAX:
            raise UnrecoverableStateError("checkpoint chain does not end in a full base",
                                          missing=[("checkpoint manifest", digest)])
        needed_by = f"checkpoint {m.checkpoint_id} (its base)"
        digest = m.base["manifest_sha256"]
    chain.reverse()
    top = chain[-1][1]
    if expect is not None:
        got = (top.checkpoint_id, top.covered_sequence_number, top.kind, top.record_sha256, top.tree_sha256)
        want = (expect.checkpoint_id, expect.covered_sequence_number, expect.kind, expect.record_sha256,
                expect.workspace_tree_sha256)
        if got != want:
            raise UnrecoverableStateError(f"the Checkpoint event and manifest {manifest_sha256[:16]}… disagree: "
                                          f"event {want}, manifest {got}",
                                          missing=[("checkpoint manifest", manifest_sha256)])
    return chain


def chain_tree(blobs: BlobStore, chain: list[tuple[str, CheckpointManifest]]) -> Tree | None:
    """The workspace tree at the top of ``chain`` (None: no workspace): the base's tree object,
    then each workspace delta, every step checked against the tree id its manifest promises.

    Raises UnrecoverableStateError if a tree or delta is missing, damaged or does not connect."""
    tree: Tree | None = None
    prev: CheckpointManifest | None = None
    for _digest, m in chain:
        who = f"checkpoint {m.checkpoint_id}"
        if m.workspace is None:
            if tree is not None:
                raise UnrecoverableStateError(f"{who} has no workspace but its base has one",
                                              missing=[("workspace tree", prev.tree_sha256 or "")])
        elif m.kind == "full":
            tree = load_tree(blobs, m.workspace["tree"], needed_by=who)
        else:
            tree = load_delta(blobs, m.workspace["delta"], needed_by=who).apply(tree or EMPTY_TREE)
        if tree is not None and tree.sha256 != m.tree_sha256:
            raise UnrecoverableStateError(f"{who}: its workspace rebuilds tree {tree.sha256[:16]}…, not the tree "
                                          f"{m.tree_sha256[:16]}… it promises",
                                          missing=[("workspace tree", m.tree_sha256)])
        prev = m
    return tree


def load_checkpoint(blobs: BlobStore, manifest_sha256: str, *, trajectory_id: str | None = None,
                    expect: CheckpointV2 | None = None, as_record: bool = False,
                    lazy_rows: bool = False) -> LoadedCheckpoint:
    """Read and verify one checkpoint with its whole chain, and rebuild its record state and tree.

    Args:
        manifest_sha256: the manifest's digest (from the ``Checkpoint`` event).
        trajectory_id: if given, every manifest of the chain must belong to it.
        expect: the publishing event's payload; its fields must agree with the manifest.
        as_record: also build the :class:`TrajectoryRecord` (``record``); for a full checkpoint
            it is built straight from the snapshot and ``state`` is None.
        lazy_rows: with ``as_record``, leave a full checkpoint's table rows stored until first
            read (:func:`~kernel_lib.checkpoint.state.record_from_snapshot`, formats 3 and 4).

    This checks the checkpoint's own consistency; whether it belongs to a given log is checked
    by :func:`check_binding`.

    Raises:
        UnrecoverableStateError: a manifest, snapshot, delta or tree of the chain is missing or
            damaged, the chain is inconsistent (trajectory, positions, digests), or the rebuilt
            record or tree does not hash to the digest the manifest promises.
    """
    checks: list[PendingCheck] = []
    with cyclic_gc_paused():   # decoding a chain builds many objects and frees few: skip the collector's passes
        try:
            loaded = _load_checkpoint(blobs, manifest_sha256, trajectory_id, expect, as_record, lazy_rows, checks)
        except BaseException:
            damage = _damage_in(checks)
            if damage is None:
                raise
            raise damage from None
        damage = _damage_in(checks)
        if damage is not None:
            raise damage
    return loaded


def _damage_in(checks: list[PendingCheck] | None) -> UnrecoverableStateError | None:
    """Wait for every pending digest check; the damage error of the first whose bytes do not hash
    to their name (as :meth:`BlobStore.get` would have raised it), or None."""
    for check in checks or ():
        try:
            check.wait()
        except UnrecoverableStateError as exc:
            return exc
    return None


class _DamageFoundLate(Exception):
    """Internal to :func:`restore`: the record snapshot's pending digest check failed after the
    checkpoint was chosen; the restore is run again with every object verified as it is read."""


def _load_checkpoint(blobs: BlobStore, manifest_sha256: str, trajectory_id: str | None,
                     expect: CheckpointV2 | None, as_record: bool, lazy_rows: bool,
                     checks: list[PendingCheck] | None = None) -> LoadedCheckpoint:
    """:func:`load_checkpoint` itself. With ``checks`` (a list), the base's record snapshot is read
    with :meth:`BlobStore.get_pending`: it is decoded while its digest is checked in the
    background, and the check is appended to ``checks`` for the caller to wait for before it
    trusts anything returned (or lets an error out: damage must be reported as damage)."""
    start = blobs.stats.bytes_read
    chain = load_chain(blobs, manifest_sha256, trajectory_id=trajectory_id, expect=expect)
    top = chain[-1][1]
    base = chain[0][1]
    who = f"checkpoint {base.checkpoint_id}"
    fmt = base.record_format          # a chain keeps the record format of its full base
    for _digest, m in chain[1:]:
        if m.record_format != fmt:
            raise UnrecoverableStateError(f"checkpoint {m.checkpoint_id} holds record format {m.record_format!r} "
                                          f"on a chain whose base {base.checkpoint_id} holds {fmt!r}",
                                          missing=[("record delta", m.record["delta"])])
    if checks is None:
        snapshot = blobs.get(base.record["snapshot"], kind="record snapshot", needed_by=who)
    else:
        snapshot, check = blobs.get_pending(base.record["snapshot"], kind="record snapshot", needed_by=who)
        checks.append(check)
    record = None
    if as_record and len(chain) == 1:
        state, record = None, record_from_snapshot(snapshot, name=base.record["snapshot"][:16], format=fmt,
                                                   lazy=lazy_rows)
    else:
        state, reducer_version = decode_record_state(snapshot, name=base.record["snapshot"][:16], format=fmt)
    del snapshot
    if base.record["snapshot"] != base.record_sha256:
        raise UnrecoverableStateError(f"{who}: record snapshot digest {base.record['snapshot'][:16]}… differs from "
                                      f"the record digest {base.record_sha256[:16]}… it promises",
                                      missing=[("record snapshot", base.record["snapshot"])])
    prev = base
    for _digest, m in chain[1:]:
        who = f"checkpoint {m.checkpoint_id}"
        base_sha, result_sha, ops = decode_record_delta(
            blobs.get(m.record["delta"], kind="record delta", needed_by=who), name=m.record["delta"][:16],
            format=m.versions["record_delta_format"])
        if base_sha != prev.record_sha256 or result_sha != m.record_sha256:
            raise UnrecoverableStateError(f"{who}: record delta {m.record['delta'][:16]}… does not connect "
                                          f"{prev.checkpoint_id} to {m.checkpoint_id}",
                                          missing=[("record delta", m.record["delta"])])
        apply_state_delta(state, ops)
        prev = m
    tree = chain_tree(blobs, chain)
    if len(chain) > 1:
        got_sha, _ = record_digest(state, reducer_version, format=fmt)
        if got_sha != top.record_sha256:
            raise UnrecoverableStateError(f"checkpoint {top.checkpoint_id}: the record rebuilt from its chain hashes "
                                          f"to {got_sha[:16]}…, not {top.record_sha256[:16]}…",
                                          missing=[("record delta", top.record["delta"])])
    for a in top.artifacts:
        if not blobs.has(a):
            raise UnrecoverableStateError(f"checkpoint {top.checkpoint_id}: required artifact {a[:16]}… is missing or "
                                          f"damaged in the blob store {blobs.name}", missing=[("artifact", a)])
    if as_record and record is None:
        try:
            record = TrajectoryRecord.from_dict(state)
        except ValueError as exc:
            raise UnrecoverableStateError(f"checkpoint {top.checkpoint_id}: record snapshot does not rebuild a "
                                          f"record: {exc}", missing=[("record snapshot", top.record_sha256)]) from None
    return LoadedCheckpoint(manifest_sha256, top, state, tree, chain, blobs.stats.bytes_read - start, record)


def restore(store: LogStore, trajectory_id: str, blobs: BlobStore, *, target: int | None = None,
            dest: str | os.PathLike | None = None, checkpoint_id: str | None = None,
            verify_blobs: bool = True, lazy_rows: bool = True) -> RestoreResult:
    """Rebuild the record and workspace of ``trajectory_id`` at log position ``target``.

    Args:
        store: the trajectory's log store (only read).
        blobs: the blob store holding the checkpoints, trees, deltas and file blobs.
        target: the log position t to restore (default: the head).
        dest: a directory (absent or empty) to write the workspace files into. The files are
            written into a new sibling directory first and renamed into place at the end, so
            ``dest`` ends up either complete or as it was.
        checkpoint_id: start from this checkpoint instead of the newest one at or before t.
        verify_blobs: hash every file blob of the final tree even without ``dest`` (default).
        lazy_rows: leave the record's table rows in their stored form until first read (default;
            :class:`~kernel_lib.core.lazy_table.LazyTable`, and for a format-4 snapshot
            :class:`~kernel_lib.core.lazy_table.IndexedLazyTable`, which also leaves the ids
            stored, found through their index): the restore costs the record's shell and the
            keys and rows the suffix touches. False builds every row before returning, so a
            malformed row fails the restore itself (what a resuming worker asks for).

    Returns:
        A :class:`RestoreResult` (record, tree, timings in seconds, bytes read).

    Raises:
        ConfigError: ``target`` is outside 0..head, or ``checkpoint_id`` is not published at or
            before it.
        UnrecoverableStateError: a needed object is missing or damaged, the pieces disagree, or
            the checkpoint used (or a later one in the suffix naming another tree) does not
            belong to this log (see the module docstring); ``missing`` names the objects.
        CheckpointError: ``dest`` cannot hold the workspace (not an empty directory, a symbolic
            link, under a regular file, a name or path too long); nothing is left at ``dest``.
        FoldError: the log suffix does not fold (from the reducer).
    """
    try:
        return _restore(store, trajectory_id, blobs, target, dest, checkpoint_id, verify_blobs, lazy_rows, True)
    except _DamageFoundLate:
        # the record snapshot was damaged: run again verifying every object as it is read, so the
        # damage is met where it always was (an UnrecoverableStateError naming the snapshot, or the
        # fallback to an older checkpoint when this one was retired)
        return _restore(store, trajectory_id, blobs, target, dest, checkpoint_id, verify_blobs, lazy_rows, False)


def _restore(store: LogStore, trajectory_id: str, blobs: BlobStore, target: int | None,
             dest: str | os.PathLike | None, checkpoint_id: str | None, verify_blobs: bool, lazy_rows: bool,
             pipelined: bool) -> RestoreResult:
    """:func:`restore`; ``pipelined``: check the record snapshot's digest in the background while
    it is decoded and the suffix is read and folded, waiting for the check before anything
    further (raises _DamageFoundLate if it fails after the checkpoint was chosen)."""
    t0 = time.perf_counter()
    head = store.head(trajectory_id)
    target = head if target is None else target
    if type(target) is not int or not 0 <= target <= head:
        raise ConfigError(f"target position {target!r} is outside the log of {trajectory_id!r} (0..{head})")
    checks: list[PendingCheck] | None = [] if pipelined else None
    try:
        found = _find_load_fold(store, trajectory_id, blobs, target, checkpoint_id, lazy_rows, checks)
        if _damage_in(checks) is not None:   # nothing derived from the snapshot is used before this
            raise _DamageFoundLate()
    except _DamageFoundLate:
        raise
    except BaseException:
        if _damage_in(checks) is not None:
            raise _DamageFoundLate() from None
        raise
    record, tree, covered, suffix, window, loaded = (found.record, found.tree, found.covered, found.suffix,
                                                     found.window, found.loaded)
    t1, t2, t3 = found.t_found, found.t_loaded, time.perf_counter()
    try:
        tree, changes = _suffix_workspace(store, trajectory_id, blobs, suffix, covered, tree, found.log_tree_at_start,
                                          window)
    except UnrecoverableStateError as exc:
        tomb = _tombstone_of(blobs, trajectory_id, exc, [], found.scanned)
        if tomb is None:
            raise
        raise _retired_error(tomb, target, f"the workspace at position {target} is known only from that checkpoint",
                             exc) from None
    if record.workspace_tree_sha256 is not None and (tree is None or tree.sha256 != record.workspace_tree_sha256):
        raise UnrecoverableStateError(
            f"the log says the workspace at position {target} is tree {record.workspace_tree_sha256[:12]}…, but the "
            f"restore arrived at {tree.sha256[:12] + '…' if tree is not None else 'no tree'}",
            missing=[("workspace tree", record.workspace_tree_sha256)])
    t4 = time.perf_counter()
    out_dir = None
    if tree is not None and (dest is not None or verify_blobs):
        materialize(tree, blobs, dest, needed_by=f"the workspace at position {target}")
        out_dir = Path(dest) if dest is not None else None
    t5 = time.perf_counter()
    return RestoreResult(
        record=record, target=target, tree=tree, workspace_dir=out_dir,
        checkpoint=loaded.manifest if loaded else None,
        checkpoint_manifest_sha256=loaded.manifest_sha256 if loaded else None,
        chain_length=len(loaded.chain) - 1 if loaded else 0, suffix_events=len(suffix), workspace_changes=changes,
        bytes_read=blobs.stats.bytes_read - found.read0,
        timings_s={"find": t1 - t0, "load": t2 - t1, "fold": found.t_folded - t2,
                   "check_wait": t3 - found.t_folded, "workspace": t4 - t3, "materialize": t5 - t4, "total": t5 - t0},
        retired=tuple(found.retired), fallback=found.fallback,
        fallback_to=(None if not found.retired else f"checkpoint {loaded.manifest.checkpoint_id}" if loaded
                     else "log"))




@dataclass
class _Folded:
    """What :func:`_find_load_fold` reached: the record at the target and the tree at the covered
    position, with what the rest of :func:`restore` needs and the phase clocks (perf_counter s)."""

    record: TrajectoryRecord
    tree: Tree | None
    covered: int
    suffix: list[Event]
    window: list[Event]
    loaded: LoadedCheckpoint | None
    log_tree_at_start: str | None
    retired: list[Tombstone]
    scanned: list[TrajectoryObjects]
    fallback: str | None
    read0: int
    t_found: float
    t_loaded: float
    t_folded: float


def _find_load_fold(store: LogStore, trajectory_id: str, blobs: BlobStore, target: int, checkpoint_id: str | None,
                    lazy_rows: bool, checks: list[PendingCheck] | None) -> _Folded:
    """Steps 1 to 4 of the module docstring for the record: find the checkpoint, load it (when
    ``checks`` is a list, the record snapshot is read with its digest check pending, appended
    there), fold the suffix."""
    ev, window = find_checkpoint(store, trajectory_id, target, checkpoint_id=checkpoint_id)
    if checkpoint_id is not None and ev is None:
        raise ConfigError(f"no published checkpoint {checkpoint_id!r} at or before position {target}")
    t1 = time.perf_counter()
    read0 = blobs.stats.bytes_read
    loaded: LoadedCheckpoint | None = None
    retired: list[Tombstone] = []
    scanned: list[TrajectoryObjects] = []
    while ev is not None:
        p: CheckpointV2 = ev.payload
        attempt: list[PendingCheck] | None = None if checks is None else []
        try:
            with cyclic_gc_paused():   # decoding a chain builds many objects and frees few
                loaded = _load_checkpoint(blobs, p.manifest_sha256, trajectory_id, p, True, lazy_rows, attempt)
            check_binding(store, trajectory_id, loaded.manifest, p.manifest_sha256, events=window)
            if checks is not None and attempt:
                checks.extend(attempt)
            break
        except UnrecoverableStateError as caught:
            exc = _damage_in(attempt) or caught   # damaged bytes are reported as damage, as a verified read would
            tomb = _tombstone_of(blobs, trajectory_id, exc, [p.manifest_sha256], scanned)
            if tomb is None:
                if exc is caught:
                    raise
                raise exc from None
            retired.append(tomb)
            if checkpoint_id is not None:
                raise _retired_error(tomb, target, f"checkpoint {checkpoint_id} was asked for by name", exc) from None
            err = exc
        ev, window = _older_checkpoint(store, trajectory_id, ev, window, tomb, target, err)
    fallback = _fallback_text(retired, loaded)
    if ev is not None:
        p = ev.payload
        record = loaded.record
        covered = loaded.manifest.covered_sequence_number
        if (record.trajectory_id, record.last_sequence_number, record.prefix_sha256) != (
                trajectory_id, covered, loaded.manifest.prefix_sha256):
            raise UnrecoverableStateError(
                f"checkpoint {p.checkpoint_id}: its record snapshot is at {record.trajectory_id!r}#"
                f"{record.last_sequence_number}, the manifest binds {trajectory_id!r}#{covered}",
                missing=[("record snapshot", p.record_sha256)])
        tree = loaded.tree
        if tree is not None and record.workspace_tree_sha256 not in (None, tree.sha256):
            raise UnrecoverableStateError(
                f"checkpoint {p.checkpoint_id}: its tree {tree.sha256[:12]}… is not the tree "
                f"{record.workspace_tree_sha256[:12]}… its own record names", missing=[("workspace tree", tree.sha256)])
    else:
        record, tree, covered = initial_record(trajectory_id), None, 0
    t2 = time.perf_counter()
    first = window[0].sequence_number if window else target + 1
    suffix = [e for e in window if covered < e.sequence_number <= target]
    if first > covered + 1:
        suffix = list(store.read(trajectory_id, covered + 1, first - 1)) + suffix
    log_tree_at_start = record.workspace_tree_sha256
    fold_into(record, suffix)
    return _Folded(record, tree, covered, suffix, window, loaded, log_tree_at_start, retired, scanned, fallback, read0,
                   t1, t2, time.perf_counter())


def _tombstone_of(blobs: BlobStore, trajectory_id: str, exc: UnrecoverableStateError, also: list[str],
                  scanned: list[TrajectoryObjects]) -> Tombstone | None:
    """The tombstone of the retired checkpoint behind ``exc`` (an object it names as missing, or
    one of ``also``), or None: then the object was lost, not retired. Scans the store once."""
    if not scanned:
        scanned.append(scan_trajectory(blobs, trajectory_id))
    return scanned[0].tombstone_for([d for _, d in exc.missing] + also)


def _retired_error(tomb: Tombstone, target: int, why: str, exc: UnrecoverableStateError) -> CheckpointRetiredError:
    return CheckpointRetiredError(
        f"cannot restore position {target}: {tomb.describe()}, and no fallback exists ({why}); this is a deliberate "
        "retirement, not data loss: keep retired checkpoints if this history must stay restorable (§11.4.2)",
        checkpoint_id=tomb.checkpoint_id, retired_by=tomb.retired_by, retired_at_unix_s=tomb.retired_at_unix_s,
        replaced_by=tomb.replaced_by, target=target, missing=exc.missing)


def _older_checkpoint(store: LogStore, trajectory_id: str, ev: Event, window: list[Event], tomb: Tombstone,
                      target: int, exc: UnrecoverableStateError) -> tuple[Event | None, list[Event]]:
    """The next fallback after the retired checkpoint published by ``ev``: the newest checkpoint
    event before ``ev``, with the events read merged into ``window`` (which runs up to the
    target); or None when there is none, which means folding the log from its start, possible
    only if no prefix was retired (else CheckpointRetiredError)."""
    below = ev.sequence_number - 1
    floor = store.retired_through(trajectory_id)
    older, read = find_checkpoint(store, trajectory_id, below) if below > floor else (None, [])
    if older is None and floor > 0:
        raise _retired_error(tomb, target, f"no older retained checkpoint, and the log prefix through #{floor} was "
                                           "retired by compaction, so it cannot be folded from its start", exc)
    return older, read + [e for e in window if e.sequence_number > below]


def _fallback_text(retired: list[Tombstone], loaded: LoadedCheckpoint | None) -> str | None:
    if not retired:
        return None
    to = (f"fell back to the older retained checkpoint {loaded.manifest.checkpoint_id} at position "
          f"{loaded.manifest.covered_sequence_number}" if loaded is not None
          else "fell back to folding the log from its start (the log is intact)")
    return "; ".join(t.describe() for t in retired) + f"; {to}"


def _suffix_workspace(store: LogStore, trajectory_id: str, blobs: BlobStore, suffix: list[Event], covered: int,
                      tree: Tree | None, log_tree: str | None, window: list[Event]) -> tuple[Tree | None, int]:
    """Carry the workspace tree from position ``covered`` through ``suffix`` (step 4 of the
    module docstring): apply each ``WorkspaceChanged`` delta, and honour (or refuse) each later
    ``Checkpoint`` event naming another tree. ``log_tree`` is the tree the log's own workspace
    changes name at ``covered`` (None: none yet). Returns the tree and the deltas applied."""
    changes = 0
    # (position, tree id) from which each tree holds: the carried tree, and what the log names
    carried: list[tuple[int, str | None]] = [(covered, tree.sha256 if tree is not None else None)]
    named: list[tuple[int, str | None]] = [(covered, log_tree)]

    def at(history: list[tuple[int, str | None]], pos: int) -> str | None:
        out = history[0][1]
        for q, sha in history:
            if q > pos:
                break
            out = sha
        return out

    for e in suffix:
        if isinstance(e.payload, WorkspaceChanged):
            wc: WorkspaceChanged = e.payload
            who = f"WorkspaceChanged {wc.change_id} at position {e.sequence_number}"
            if tree is None:
                tree = load_tree(blobs, wc.base_tree_sha256, needed_by=who)
            delta = load_delta(blobs, wc.delta_sha256, needed_by=who)
            if (delta.base_tree, delta.result_tree) != (wc.base_tree_sha256, wc.result_tree_sha256):
                raise UnrecoverableStateError(f"{who}: its stored delta is from {delta.base_tree[:12]}… to "
                                              f"{delta.result_tree[:12]}…, not what the event names",
                                              missing=[("workspace delta", wc.delta_sha256)])
            if tree.sha256 != wc.base_tree_sha256:
                raise UnrecoverableStateError(
                    f"{who} starts from tree {wc.base_tree_sha256[:12]}…, but the workspace restored so far is "
                    f"{tree.sha256[:12]}…", missing=[("workspace delta base", wc.base_tree_sha256)])
            tree = delta.apply(tree)
            changes += 1
            carried.append((e.sequence_number, tree.sha256))
            named.append((e.sequence_number, tree.sha256))
            continue
        if not is_published_checkpoint(e) or not covers_an_earlier_position(e):
            continue
        cp: CheckpointV2 = e.payload
        pos, claim = cp.covered_sequence_number, cp.workspace_tree_sha256
        if claim is None or pos < covered or at(carried, pos) == claim:
            continue   # says nothing about the workspace, predates the start, or agrees
        who = f"checkpoint {cp.checkpoint_id} (published at position {e.sequence_number})"
        logged = at(named, pos)
        if logged is not None:
            why = f"the log's workspace changes give tree {logged[:12]}… there"
        elif named[-1][0] > pos:
            why = f"the log records a workspace change at position {named[-1][0]}, after that position"
        elif pos < carried[-1][0]:
            why = f"a checkpoint covering the later position {carried[-1][0]} already named the tree from there on"
        elif carried[-1] == (pos, at(carried, pos)) and carried[-1][1] is not None:
            why = f"another checkpoint covering the same position names tree {carried[-1][1][:12]}…"
        else:
            why = ""
        if why:
            raise UnrecoverableStateError(f"{who} says the workspace at position {pos} is tree {claim[:12]}…, but "
                                          f"{why}", missing=[("workspace tree", claim)])
        # the log names no tree there: the later checkpoint is the authority; verify, then adopt
        chain = load_chain(blobs, cp.manifest_sha256, trajectory_id=trajectory_id, expect=cp)
        check_binding(store, trajectory_id, chain[-1][1], cp.manifest_sha256, events=window)
        later = chain_tree(blobs, chain)
        if later is None or later.sha256 != claim:
            raise UnrecoverableStateError(f"{who}: its chain does not rebuild the tree {claim[:12]}… it names",
                                          missing=[("workspace tree", claim)])
        tree = later
        carried.append((pos, tree.sha256))
    return tree, changes
