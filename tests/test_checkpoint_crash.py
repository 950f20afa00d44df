"""Crash-state exploration of checkpoint capture (§11.4.1): publication follows availability.

Fault model: the host or the process crashes after any file operation of a workload that captures
a full checkpoint, logs workspace changes, captures two incremental checkpoints, consolidates and
deletes the superseded deltas; unsynced writes may be lost, reordered or torn.
Invariant: recovery always finds the previous or the new checkpoint (the newest Checkpoint event
that survived), never a half one; every acknowledged checkpoint survives; restore equals the fold
of the surviving log; a new capture on the crashed state works.
Goal: the number of states explored is reported, and a store that skips its barriers is caught.
"""

from __future__ import annotations

from kernel_lib.checkpoint.blobs import DirectoryBlobStore
from kernel_lib.verify.checkpoint_workload import explore


def test_every_crash_state_of_a_capture_leaves_the_previous_or_the_new_checkpoint():
    report = explore(seed=0)
    assert report.violations == 0, report.violation_details[:3]
    assert report.states_explored > 200 and report.ops > 100
    assert {"process", "host", "torn"} <= set(report.by_kind)
    # every published checkpoint of the workload was the one in force in some crash state, and so
    # was "none yet" (a crash before the first publication)
    assert len(report.restored_from) == 5 and report.restored_from["none"] > 0


class _SkipsBarriers(DirectoryBlobStore):
    """A broken store: writes objects but never fdatasyncs them or fsyncs their directory."""

    def _write_many(self, items):
        for sub in sorted({d[:2] for d, _ in items}):
            self.fs.makedirs(f"{self.root}/{sub}")
        for d, data in items:
            h = self.fs.open_file(self.path_of(d), create=True)
            self.fs.pwrite(h, 0, data)
            self.fs.close(h)


def test_the_exploration_catches_a_checkpoint_published_before_its_bytes_are_durable():
    report = explore(seed=0, blob_store_cls=_SkipsBarriers, max_states=300)
    assert report.violations > 0
    assert any("(3)" in p for d in report.violation_details for p in d["problems"])
