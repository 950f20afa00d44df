"""Crash-state exploration of checkpoint capture and publication (§11.4.1).

The claim under test: *a crash at any moment of a capture leaves either the previous published
checkpoint or the new one in force, never a half one*, and restore at the surviving log's head
then rebuilds exactly what folding that log from the start gives.

Method: the crash-state engine of :mod:`kernel_lib.verify.engine`, with this workload
(:class:`CaptureWorkload`):

1. **Record.** The workload drives a :class:`~kernel_lib.log.segment.SegmentStore` (``/log``) and a
   :class:`~kernel_lib.checkpoint.blobs.DirectoryBlobStore` (``/ckpt``) over one
   :class:`~kernel_lib.log.fs.RecordingFileSystem`: events appended at the fdatasync tier, a full
   checkpoint, logged workspace changes, two incremental checkpoints, a consolidation and the
   deletion of the superseded deltas. After each capture returns, an acknowledgment marker names
   the checkpoint.
2. **Crash states.** :func:`kernel_lib.verify.engine.crash_states` builds, for a crash after every
   file operation, the process-crash, host-crash, out-of-order (subset) and torn-write states.
3. **Check** each distinct state, reopened in a fresh memory file system:

   (1) the log reopens without reporting corruption;
   (2) every checkpoint acknowledged before the crash is published in the surviving log;
   (3) :func:`~kernel_lib.checkpoint.restore.restore` at the head succeeds from the newest
       ``Checkpoint`` event of the surviving log (the previous or the new checkpoint);
   (4) the restored record equals the fold of the surviving log from record_0, and the restored
       tree is the one the log names (its last workspace change, else the checkpoint's tree);
   (5) a new full capture on the crashed state (same workspace bytes) succeeds and restores: a
       torn object file left by the crash does not poison content-addressed deduplication.

Entry point: :func:`explore`. It counts the states explored and lists every violation; its
report tallies ``restored_from`` (which checkpoint restore used, ``"none"`` before the first
publication survived).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from kernel_lib.sim.events import EventMaker
from kernel_lib.verify.engine import CrashReport, CrashWorkload, Verdict, explore as explore_workloads
from kernel_lib.errors import CorruptLogError
from kernel_lib.log.fs import FileSystem, MemoryFileSystem, Op, RecordingFileSystem
from kernel_lib.log.segment import SegmentStore
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.core.record import fold, initial_record
from kernel_lib.checkpoint.blobs import DirectoryBlobStore
from kernel_lib.checkpoint.capture import Checkpointer, log_workspace_change
from kernel_lib.checkpoint.restore import restore
from kernel_lib.checkpoint.tree import files_tree

LOG_DIR = "/log"
BLOB_DIR = "/ckpt"
TRAJECTORY = "traj_ckpt_crash"
#: the clock reading the workload's retirement tombstones carry (Unix seconds). A wall-clock reading
#: would change the tombstone's bytes, hence its content address, from run to run, and with it the
#: recorded file operations the crash states are built from.
RETIRED_AT_UNIX_S = 1_800_000_000.0
SEGMENT_BYTES = 64 * 1024 * 1024

#: The workload's workspace states, in order (path → bytes or (bytes, executable)).
WORKSPACES: list[dict[str, Any]] = [
    {"stats.py": b"def mean(xs):\n    return sum(xs) / len(xs)\n", "tests/test_stats.py": b"assert True\n",
     "run.sh": (b"#!/bin/sh\npytest -q\n", True)},
    {"stats.py": b"def mean(xs):\n    return sum(xs) / max(len(xs), 1)\n", "tests/test_stats.py": b"assert True\n",
     "run.sh": (b"#!/bin/sh\npytest -q\n", True), "NOTES.md": b"r18: guard the empty list\n"},
    {"stats.py": b"def mean(xs):\n    return sum(xs) / max(len(xs), 1)\n", "tests/test_stats.py": b"assert 1\n",
     "run.sh": (b"#!/bin/sh\npytest -q\n", False)},
]


@dataclass
class Recorded:
    """The recorded capture workload: its ops and the workspace files of each tree id."""

    ops: list[Op]
    tree_files: dict[str, dict[str, Any]]    # tree id -> workspace files


def _workload(fs: RecordingFileSystem, seed: int, blob_store_cls: type[DirectoryBlobStore]) -> dict[str, dict]:
    store = SegmentStore.open(LOG_DIR, fs=fs, segment_bytes=SEGMENT_BYTES, create=True)
    try:
        blobs = blob_store_cls(BLOB_DIR, fs=fs)
        log = TrajectoryLog(store, TRAJECTORY, must_survive="host_crash")
        maker = EventMaker(TRAJECTORY, random.Random(seed))
        ck = Checkpointer(log, blobs, max_chain=4)
        trees = {files_tree(w)[0].sha256: w for w in WORKSPACES}

        def add(n: int) -> None:
            payloads = []
            for _ in range(n):
                payloads.append(maker.make().payload)
            log.append_many(payloads)

        def record():
            return fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))

        def ack(result) -> None:
            fs.mark_ack([result.checkpoint_id], "fdatasync")

        add(6)
        ack(ck.capture(record(), WORKSPACES[0], kind="full"))
        add(3)
        base = files_tree(WORKSPACES[0])[0]
        log_workspace_change(log, blobs, base, WORKSPACES[1], operation_id="edit_r18")
        add(2)
        ack(ck.capture(record(), WORKSPACES[1], kind="incremental"))
        add(2)
        log_workspace_change(log, blobs, files_tree(WORKSPACES[1])[0], WORKSPACES[2], operation_id="edit_r19")
        ack(ck.capture(record(), WORKSPACES[2], kind="incremental"))
        cons = ck.consolidate()
        ack(cons.capture)
        ck.retire(cons, delete=True, now_unix_s=RETIRED_AT_UNIX_S)   # a fixed reading: the same bytes every run
        add(2)
        return trees
    finally:
        store.close()


class CaptureWorkload(CrashWorkload):
    """The capture workload as an engine workload, on ``blob_store_cls`` (a subclass of
    :class:`~kernel_lib.checkpoint.blobs.DirectoryBlobStore`, e.g. a deliberately broken one).
    Promised in a crash state: every checkpoint acknowledged before it. Tally: ``restored_from``."""

    name = "checkpoint-capture"
    description = ("a full checkpoint, logged workspace changes, two incremental checkpoints, a "
                   "consolidation and the deletion of the superseded deltas (§11.4.1)")
    tallies = ("restored_from",)

    def __init__(self, blob_store_cls: type[DirectoryBlobStore] = DirectoryBlobStore):
        self.blob_store_cls = blob_store_cls
        self.tree_files: dict[str, dict[str, Any]] = {}

    def record(self, fs: RecordingFileSystem, seed: int) -> None:
        fs.makedirs(LOG_DIR)
        self.tree_files = _workload(fs, seed, self.blob_store_cls)

    def check(self, fs: MemoryFileSystem, promised: Sequence[str]) -> Verdict:
        problems, used = _check(self.tree_files, fs, promised, self.blob_store_cls)
        return Verdict(tuple(problems), tally={"restored_from": used or "none"})


def record_workload(seed: int = 0, blob_store_cls: type[DirectoryBlobStore] = DirectoryBlobStore) -> Recorded:
    """Run the capture workload on a recording file system; return its ops and trees."""
    fs = RecordingFileSystem(MemoryFileSystem())
    wl = CaptureWorkload(blob_store_cls)
    wl.record(fs, seed)
    return Recorded(fs.ops, wl.tree_files)


def _check(tree_files: dict[str, dict[str, Any]], mem: FileSystem, acked: Sequence[str],
           blob_store_cls: type[DirectoryBlobStore]) -> tuple[list[str], str | None]:
    problems: list[str] = []
    try:
        store = SegmentStore.open(LOG_DIR, fs=mem, segment_bytes=SEGMENT_BYTES, create=True)
    except CorruptLogError as exc:
        return [f"(1) the log reports corruption after a crash: {exc}"], None
    used = None
    try:
        events = list(store.read(TRAJECTORY))
        folded = fold(initial_record(TRAJECTORY), events)
        published = [c["checkpoint_id"] for c in folded.checkpoints if "manifest_sha256" in c]
        for cid in acked:
            if cid not in published:
                problems.append(f"(2) acknowledged checkpoint {cid} is not in the surviving log")
        blobs = blob_store_cls(BLOB_DIR, fs=mem)
        try:
            res = restore(store, TRAJECTORY, blobs)
        except Exception as exc:  # noqa: BLE001 - any failure to restore is a finding
            return problems + [f"(3) restore at the head failed: {type(exc).__name__}: {exc}"], None
        used = res.checkpoint.checkpoint_id if res.checkpoint else None
        newest = published[-1] if published else None
        if used != newest:
            problems.append(f"(3) restore used checkpoint {used}, the newest published is {newest}")
        if res.record.state_dict() != folded.state_dict():
            problems.append("(4) the restored record differs from the fold of the surviving log")
        want_tree = folded.workspace_tree_sha256
        if want_tree is None and published:
            want_tree = folded.checkpoints[-1]["workspace_tree_sha256"] if folded.checkpoints else None
        if res.tree_sha256 != want_tree:
            problems.append(f"(4) restored tree {str(res.tree_sha256)[:12]} is not the tree {str(want_tree)[:12]} "
                            "the log names")
        # (5) capture again on the crashed state, then restore from the new checkpoint
        if res.tree_sha256 is not None or not published:
            files = tree_files.get(res.tree_sha256, WORKSPACES[0])
            log = TrajectoryLog(store, TRAJECTORY, must_survive="host_crash")
            try:
                again = Checkpointer(log, blob_store_cls(BLOB_DIR, fs=mem)).capture(res.record, files, kind="full")
                res2 = restore(store, TRAJECTORY, blob_store_cls(BLOB_DIR, fs=mem))
                if res2.checkpoint is None or res2.checkpoint.checkpoint_id != again.checkpoint_id:
                    problems.append("(5) the capture after the crash is not the one restore uses")
                elif res2.record.state_dict() != fold(initial_record(TRAJECTORY), store.read(TRAJECTORY)).state_dict():
                    problems.append("(5) restore after a new capture differs from the fold of the log")
            except Exception as exc:  # noqa: BLE001
                problems.append(f"(5) capture or restore after the crash failed: {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"checking raised {type(exc).__name__}: {exc}")
    finally:
        store.close()
    return problems, used


def explore(seed: int = 0, *, max_states: int | None = None,
            blob_store_cls: type[DirectoryBlobStore] = DirectoryBlobStore,
            progress: bool | Callable[[int, int], None] = False) -> CrashReport:
    """Record the capture workload, build its crash states and check each (module docstring).

    Args:
        seed: seeds event text, sampled subsets and garbage bytes.
        max_states: check at most this many generated states (a seeded sample).
        blob_store_cls: the blob store under test (a subclass, e.g. a deliberately broken one).
        progress: True for a tqdm bar; a callable is called as ``progress(done, total)`` after
            each state.

    Returns:
        A :class:`~kernel_lib.verify.engine.CrashReport` with one row, ``checkpoint-capture``:
        ``ops`` file operations recorded, ``states_generated`` crash states kept (sampled),
        ``states_explored`` distinct ones checked (``by_kind``), ``restored_from`` (which
        checkpoint restore used, ``"none"``: no checkpoint survived yet), ``violations`` and the
        first 100 ``violation_details``.

    Raises:
        ConfigError: ``max_states`` < 1.
    """
    return explore_workloads([CaptureWorkload(blob_store_cls)], seed=seed, max_states=max_states,
                             progress=progress, sample_salt="ckpt:max_states", max_details=100)
