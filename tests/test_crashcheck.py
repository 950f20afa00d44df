"""Crash-consistency exploration of the segment log (§11.3.1 table 2, footnote 2).

Fault model: process crash, host crash, out-of-order persistence of unsynced writes, a torn last
write. Invariant: every acknowledgment's promise holds after reopen, and a crash never looks like
corruption. Goal: ≥ 1,000 distinct crash states with no violation — and proof that the checker
does find violations in a store that acknowledges FDATASYNC without the barrier.
"""

from __future__ import annotations

import argparse
import json

import pytest

import kernel_lib.cli.verify as verify_commands
import kernel_lib.verify.log_workload as crashcheck
from kernel_lib.verify.log_workload import CrashState, crash_states, materialize, run
from kernel_lib.log.fs import MemoryFileSystem, RecordingFileSystem
from kernel_lib.errors import CorruptLogError
from kernel_lib.log.segment import SegmentStore


def test_every_crash_state_keeps_its_promises():
    report = run(seed=0)
    assert report.states_explored >= 1000, report.to_dict()
    assert report.violations == 0, report.violation_details[:3]
    assert set(report.workloads) == set(crashcheck.WORKLOADS) and len(report.workloads) >= 3
    for name, w in report.workloads.items():
        assert w["states_explored"] > 0 and w["reopen_trimmed"] > 0, name
        assert {"process", "torn"} <= set(w["by_kind"]), name
    kinds = {k for w in report.workloads.values() for k in w["by_kind"]}
    assert kinds == {"process", "host", "subset", "torn"}
    assert report.seconds > 0   # how long it takes is `crashcheck`'s own figure, not a test (machines are noisy)


def test_another_seed_also_passes():
    report = run(seed=7, max_states=300)
    assert report.states_explored > 200 and report.violations == 0


class AcksWithoutFdatasync(SegmentStore):
    """Broken on purpose: acknowledges FDATASYNC after only a write()."""

    def _sync(self):   # the barrier of a roll or a fence
        self._synced = (self._segment, self._size)

    def _sync_through(self, target):   # the barrier of an append (run outside the store lock)
        self._synced = max(self._synced, (self._segment, self._size))


class RollsWithoutSyncingTheOldSegment(SegmentStore):
    """Broken on purpose: starts a new segment without syncing the old one or the directory."""

    def _roll(self):
        self.fs.close(self._handle)
        self._segment += 1
        self._handle = self.fs.open_file(self._path(self._segment), create=True)
        self._size = 0
        self._synced = (self._segment, 0)


def test_checker_finds_a_store_that_skips_fdatasync():
    report = run(workloads=["fdatasync-appends"], store_cls=AcksWithoutFdatasync)
    assert report.violations > 0
    problems = [p for d in report.violation_details for p in d["problems"]]
    assert any("(2) acknowledged event" in p and "missing" in p for p in problems)


def test_checker_finds_a_roll_that_skips_its_barriers():
    report = run(workloads=["roll-fence-reopen"], store_cls=RollsWithoutSyncingTheOldSegment)
    assert report.violations > 0
    assert any(d["state"] in ("host", "subset", "torn") for d in report.violation_details)


class RollKeepsItsZeros(SegmentStore):
    """Broken on purpose: a roll leaves the old segment's preallocated zeros in place."""

    def _roll(self):
        self._allocated = self._size   # the roll then sees nothing to cut
        super()._roll()


def test_preallocated_workloads_extend_roll_and_cut_their_zeros():
    for name in ("preallocated-steps", "preallocated-crash-tail"):
        ops = crashcheck.record(crashcheck.WORKLOADS[name]).ops
        fills = [o for o in ops if o.kind == "write" and o.data and not o.data.strip(b"\0")]
        cuts = [o for o in ops if o.kind == "truncate"]
        creates = [o for o in ops if o.kind == "create" and o.path.endswith(".seg")]
        assert len(fills) >= 5 and len(cuts) >= 5 and len(creates) >= 5, name
    report = run(workloads=["preallocated-steps", "preallocated-crash-tail"])
    assert report.violations == 0 and all(w["reopen_trimmed"] > 0 for w in report.workloads.values())


def test_zeros_left_in_a_rolled_segment_are_refused_as_corruption():
    """The rule that makes a zero tail the log's end holds for the last segment only."""
    with pytest.raises(CorruptLogError, match="damage to durable data"):
        run(workloads=["preallocated-steps"], store_cls=RollKeepsItsZeros)


def test_crash_state_model_on_a_tiny_recording():
    rec = RecordingFileSystem(MemoryFileSystem())
    rec.makedirs("/d")
    h = rec.open_file("/d/f", create=True)
    rec.pwrite(h, 0, b"A" * 600)
    rec.fdatasync(h)
    rec.fsync_dir("/d")
    rec.pwrite(h, 600, b"B" * 1000)          # unsynced, spans sectors 1..3
    ops = rec.ops
    assert [o.kind for o in ops] == ["makedirs", "create", "write", "fdatasync", "fsync_dir", "write"]
    n = len(ops)
    states = crash_states(ops)
    host = next(s for s in states if s.crash_after == n and s.kind == "host")
    assert materialize(ops, host).files["/d/f"] == b"A" * 600
    proc = next(s for s in states if s.crash_after == n and s.kind == "process")
    assert materialize(ops, proc).files["/d/f"] == b"A" * 600 + b"B" * 1000
    torn = [s for s in states if s.crash_after == n and s.kind == "torn"]
    # cuts at 600 (nothing), 1024, 1536 -> zero/garbage for each, missing for the two real cuts
    assert sorted({s.torn[1] for s in torn}) == [0, 424, 936]
    zero = next(s for s in torn if s.torn == (5, 424, "zero"))
    assert materialize(ops, zero).files["/d/f"] == b"A" * 600 + b"B" * 424 + bytes(576)
    missing = next(s for s in torn if s.torn == (5, 936, "missing"))
    assert materialize(ops, missing).files["/d/f"] == b"A" * 600 + b"B" * 936
    # before the directory fsync, a host crash loses the file's creation
    early = CrashState(3, "host", frozenset({1}))
    assert materialize(ops, early).files == {}


def test_cli_json_and_exit_code(capsys):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers()
    verify_commands.add_commands(sub)
    args = ap.parse_args(["crashcheck", "--json", "--max-states", "40", "--workload", "write-bursts", "--seed", "3"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["violations"] == 0 and 0 < out["states_explored"] <= 40
    assert list(out["workloads"]) == ["write-bursts"]
