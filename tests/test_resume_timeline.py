"""Timing a real resume stage by stage (§11.5, eq. 7) and the timeline widget.

Fault model: the replacement resumes from an SQLite log with a checkpoint and a logged workspace
change after it; or the prefix it needs is not complete (a checkpoint object lost, rows of the log
lost). Invariant: each of the six stages of eq. 7 gets a duration >= 0, the restored record is the
plain fold of the log, the restored files are the ones the log names, and an incomplete prefix
raises ReconstructionUnavailableError before any stage runs (no lease, no fence, no files).
Goal: the serial sum and the dependency critical path, both computed from the stage durations,
with the prefill computed from its model; a widget that refuses bad givens and recomputes on good
ones.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, files_tree, log_workspace_change
from kernel_lib.gate.dispatch import ToolReply
from kernel_lib.errors import ConfigError, ReconstructionUnavailableError, StaleOwnerError
from kernel_lib.core.events import ControlChanged
from kernel_lib.log import SQLiteStore, TrajectoryLog
from kernel_lib.ownership.leases import SQLiteOwnershipCoordinator
from kernel_lib.core.record import fold, initial_record
from kernel_lib.resume.stages import (
    DEPENDS_ON,
    MEASURED_LABEL,
    PREFILL_LABEL,
    STAGE_NAMES,
    PrefillModel,
    ResumeTimeline,
    Stage,
    timed_resume,
)
from tests.helpers import intent, task

TID = "traj_resume"
MEASURED = ("ownership", "checkpoint_suffix_read", "fold", "workspace_restore", "reconciliation")


# ------------------------------------------------------------------------------------------------
# the prefill model
# ------------------------------------------------------------------------------------------------


@settings(max_examples=80)
@given(ctx=st.integers(0, 10**9), frac=st.floats(0, 1), rate=st.floats(1e-3, 1e9))
def test_prefill_follows_its_formula(ctx, frac, rate):
    cached = int(ctx * frac)
    m = PrefillModel(ctx, cached, rate)
    assert m.needed and m.prefill_tokens == ctx - cached
    assert m.prefill_s == (ctx - cached) / rate
    assert PrefillModel.from_dict(m.to_dict()) == m


def test_no_prefill_is_zero_with_its_reason():
    m = PrefillModel.none("the trajectory stays paused")
    assert not m.needed and m.prefill_tokens == 0 and m.prefill_s == 0.0
    assert "paused" in m.describe() and PrefillModel.from_dict(m.to_dict()) == m


@pytest.mark.parametrize("ctx, cached, rate, name", [
    (-1, 0, 1000.0, "context_tokens"), (100, -1, 1000.0, "cached_prefix_tokens"),
    (100, 101, 1000.0, "cached_prefix_tokens"), (100.5, 0, 1000.0, "context_tokens"),
    (True, 0, 1000.0, "context_tokens"), ("100", 0, 1000.0, "context_tokens"),
    (10**13, 0, 1000.0, "context_tokens"), (100, 0, 0, "prefill_tokens_per_s"),
    (100, 0, -5.0, "prefill_tokens_per_s"), (100, 0, math.nan, "prefill_tokens_per_s"),
    (100, 0, math.inf, "prefill_tokens_per_s"), (100, 0, None, "prefill_tokens_per_s"),
    (10**12, 0, 1e-320, "prefill_tokens_per_s"),
])
def test_prefill_refuses_bad_givens(ctx, cached, rate, name):
    with pytest.raises(ConfigError, match=name):
        PrefillModel(ctx, cached, rate)


# ------------------------------------------------------------------------------------------------
# serial sum and critical path on hand-built timelines
# ------------------------------------------------------------------------------------------------

PREFILL = PrefillModel(8192, 6144, 20000.0)


def _expected_critical(d: dict[str, float], prefill_s: float) -> tuple[float, list[str]]:
    """The two chains of the DAG, written out by hand: the reconciliation chain and the
    workspace chain."""
    first = ["ownership"] if d["ownership"] > d["checkpoint_suffix_read"] + d["fold"] else \
        ["checkpoint_suffix_read", "fold"]
    main = max(d["ownership"], d["checkpoint_suffix_read"] + d["fold"]) + d["reconciliation"] + prefill_s
    side = d["checkpoint_suffix_read"] + d["workspace_restore"]
    if side > main:
        return side, ["checkpoint_suffix_read", "workspace_restore"]
    return main, first + ["reconciliation", "prefill"]


@pytest.mark.parametrize("durations", [
    # ownership outlasts read + fold: the path goes through ownership
    {"ownership": 0.50, "checkpoint_suffix_read": 0.10, "fold": 0.20, "workspace_restore": 0.05, "reconciliation": 0.3},
    # read + fold outlast ownership: the path goes through the read and the fold
    {"ownership": 0.01, "checkpoint_suffix_read": 0.40, "fold": 0.25, "workspace_restore": 0.05, "reconciliation": 0.3},
    # a huge workspace restore is the critical path on its own
    {"ownership": 0.01, "checkpoint_suffix_read": 0.10, "fold": 0.05, "workspace_restore": 9.0, "reconciliation": 0.1},
])
def test_critical_path_against_serial_sum(durations):
    tl = ResumeTimeline.from_durations(durations, prefill=PREFILL)
    d = {**durations, "prefill": PREFILL.prefill_s}
    assert tl.serial_sum_s == pytest.approx(sum(d.values()))
    want_s, want_path = _expected_critical(durations, PREFILL.prefill_s)
    assert tl.critical_path_s == pytest.approx(want_s)
    assert tl.critical_path == want_path
    assert tl.critical_path_s < tl.serial_sum_s
    frame = tl.to_frame()
    assert frame["stage"].to_list() == list(STAGE_NAMES)
    serial_start, t = [], 0.0
    for n in STAGE_NAMES:
        serial_start.append(t)
        t += d[n]
    assert frame["serial_start_s"].to_list() == pytest.approx(serial_start)
    assert frame["serial_end_s"].to_list()[-1] == pytest.approx(tl.serial_sum_s)
    over = dict(zip(frame["stage"].to_list(), frame["overlapped_start_s"].to_list()))
    assert over["ownership"] == 0 and over["checkpoint_suffix_read"] == 0
    assert over["fold"] == pytest.approx(d["checkpoint_suffix_read"])
    assert over["workspace_restore"] == pytest.approx(d["checkpoint_suffix_read"])
    assert over["reconciliation"] == pytest.approx(max(d["ownership"], d["checkpoint_suffix_read"] + d["fold"]))
    assert over["prefill"] == pytest.approx(over["reconciliation"] + d["reconciliation"])
    assert max(frame["overlapped_end_s"].to_list()) == pytest.approx(tl.critical_path_s)
    crit = dict(zip(frame["stage"].to_list(), frame["on_critical_path"].to_list()))
    assert {n for n, c in crit.items() if c} == set(want_path)
    assert frame.filter(frame["stage"] == "prefill")["source"].item() == PREFILL_LABEL


@settings(max_examples=100)
@given(st.lists(st.floats(0, 100), min_size=6, max_size=6))
def test_critical_path_is_the_longest_chain(values):
    d = dict(zip(STAGE_NAMES, values))
    tl = ResumeTimeline.from_durations(d)
    want_s, _ = _expected_critical(d, d["prefill"])
    assert tl.critical_path_s == pytest.approx(want_s)
    assert tl.critical_path_s <= tl.serial_sum_s + 1e-9
    path = tl.critical_path
    assert not DEPENDS_ON[path[0]]                           # starts at a stage with no dependency
    assert all(a in DEPENDS_ON[b] for a, b in zip(path, path[1:]))   # each step is an edge of the DAG
    assert math.fsum(d[n] for n in path) == pytest.approx(tl.critical_path_s)


def test_timeline_checks_its_stages_and_round_trips():
    tl = ResumeTimeline.from_durations({n: 0.1 for n in STAGE_NAMES[:-1]}, prefill=PREFILL)
    assert ResumeTimeline.from_dict(tl.to_dict()) == tl
    stages = list(tl.stages)
    with pytest.raises(ConfigError, match="missing"):
        ResumeTimeline(tuple(stages[:-1]))
    with pytest.raises(ConfigError, match="repeated"):
        ResumeTimeline(tuple(stages + [stages[0]]))
    cyclic = [Stage(s.name, s.start_s, s.end_s, ("prefill",) if s.name == "ownership" else s.depends_on)
              for s in stages]
    with pytest.raises(ConfigError, match="cycle"):
        ResumeTimeline(tuple(cyclic))
    with pytest.raises(ConfigError, match="not another stage"):
        ResumeTimeline(tuple(Stage(s.name, s.start_s, s.end_s, ("nowhere",)) if s.name == "fold" else s
                             for s in stages))
    with pytest.raises(ConfigError, match="before it starts"):
        Stage("fold", 1.0, 0.5)
    with pytest.raises(ConfigError, match="negative"):
        ResumeTimeline.from_durations({**{n: 0.1 for n in STAGE_NAMES}, "fold": -1.0})
    # with_prefill replaces the prefill stage only, starting where reconciliation ended
    other = tl.with_prefill(PrefillModel(1000, 0, 100.0))
    assert other.stage("prefill").duration_s == pytest.approx(10.0)
    assert other.stage("prefill").start_s == tl.stage("reconciliation").end_s
    assert [s for s in other.stages if s.name != "prefill"] == [s for s in tl.stages if s.name != "prefill"]


# ------------------------------------------------------------------------------------------------
# a real resume from an SQLite log with a checkpoint
# ------------------------------------------------------------------------------------------------

FILES_AT_CHECKPOINT = {"src/stats.py": b"def median(xs):\n    return sorted(xs)[len(xs) // 2]\n",
                       "README": b"repair r18\n"}
FILES_NOW = {**FILES_AT_CHECKPOINT, "src/stats.py": b"def median(xs):\n    xs = sorted(xs)\n    return xs\n"}


def _build(tmp_path: Path):
    """An SQLite log: task, intents, a full checkpoint with files, then a logged workspace change
    and more intents (test_r18 stays in doubt). Returns (store path, blobs, capture, head)."""
    store = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    log = TrajectoryLog(store, TID, must_survive="host_crash")
    log.append(task(ceiling=100.0))
    for i in range(5):
        log.append(intent(op=f"op{i}"))
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    cap = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), FILES_AT_CHECKPOINT,
                                           kind="full")
    log_workspace_change(log, blobs, files_tree(FILES_AT_CHECKPOINT)[0], FILES_NOW, operation_id="edit")
    for i in range(5, 9):
        log.append(intent(op=f"op{i}"))
    log.append(intent(op="test_r18"))
    head = store.head(TID)
    store.close()
    return tmp_path / "log.sqlite", blobs, cap, head


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_timed_resume_on_a_real_sqlite_log_with_a_checkpoint(tmp_path):
    path, blobs, cap, head = _build(tmp_path)
    store = SQLiteStore.open(path, create=True)
    coord = SQLiteOwnershipCoordinator.open(tmp_path / "leases.sqlite")
    fence_before = store.fence(TID)
    try:
        r = timed_resume(store, TID, blobs=blobs, coordinator=coord, owner_id="worker-B",
                         workspace_dest=tmp_path / "restored", prefill=PREFILL)
        tl = r.timeline
        assert [s.name for s in tl.stages] == list(STAGE_NAMES)
        for name in MEASURED:
            s = tl.stage(name)
            assert s.measured and s.duration_s >= 0 and s.source == MEASURED_LABEL
            assert s.depends_on == DEPENDS_ON[name]
        pre = tl.stage("prefill")
        assert not pre.measured and pre.duration_s == pytest.approx(PREFILL.prefill_s) and tl.prefill == PREFILL
        assert pre.start_s == tl.stage("reconciliation").end_s
        # the stages ran one after another, after the availability proof
        assert tl.availability_s > 0
        ends = [tl.stage(n).end_s for n in MEASURED]
        assert ends == sorted(ends) and tl.stage("ownership").start_s >= tl.availability_s
        assert tl.serial_sum_s == pytest.approx(math.fsum(tl.durations_s.values()))
        assert tl.critical_path_s <= tl.serial_sum_s
        # the restored record is the plain fold of the log; the workspace is the one the log names
        assert r.record.to_dict() == fold(initial_record(TID), store.read(TID)).to_dict()
        assert r.restore_result.checkpoint.checkpoint_id == cap.checkpoint_id
        assert r.restore_result.suffix_events == head - cap.covered_sequence_number
        assert r.restore_result.workspace_changes == 1
        assert _files(tmp_path / "restored") == FILES_NOW and r.workspace_dir == tmp_path / "restored"
        # ownership is real: a new epoch, in the coordinator and as the log's fence
        assert r.lease.owner_id == "worker-B" and r.owner_epoch == r.lease.owner_epoch > fence_before
        assert store.fence(TID) == r.owner_epoch and coord.current(TID).owner_epoch == r.owner_epoch
        old = TrajectoryLog(store, TID, must_survive="host_crash", owner_epoch=fence_before)
        with pytest.raises(StaleOwnerError):
            old.append(intent(op="late"))
        # no reconcile callable: in-doubt operations listed, none settled
        assert r.reconciliation["in_doubt"] == r.record.in_doubt() and "test_r18" in r.record.in_doubt()
        assert r.reconciliation["queried"] == 0
        assert ResumeTimeline.from_dict(tl.to_dict()) == tl
        assert r.restore_result.timings_s["find"] + r.restore_result.timings_s["load"] == \
            pytest.approx(tl.stage("checkpoint_suffix_read").duration_s)
    finally:
        coord.close()
        store.close()


def test_reconcile_callable_settles_through_the_gate_and_is_timed(tmp_path):
    path, blobs, _, _ = _build(tmp_path)
    store = SQLiteStore.open(path, create=True)
    seen = []

    def reconcile(gate):
        seen.append(gate.log.owner_epoch)
        for op_id in gate.record.in_doubt():
            att = gate.record.operations[op_id].current_attempt_id
            gate.record_evidence(op_id, att, ToolReply(status="completed", outcome={"passed": 5},
                                                       observation_complete=True, charged_usd=0.0),
                                 source="reconciliation")
        return {"settled": len(seen)}

    try:
        r = timed_resume(store, TID, blobs=blobs, reconcile=reconcile)   # no coordinator: a bare fence
        assert r.lease is None and seen == [r.owner_epoch] == [store.fence(TID)]
        assert r.record.in_doubt() == [] and r.record.operations["test_r18"].status == "established"
        assert r.record.to_dict() == fold(initial_record(TID), store.read(TID)).to_dict()
        assert r.reconciliation == {"settled": 1}
        assert r.timeline.stage("reconciliation").measured
        assert not r.timeline.prefill.needed and r.timeline.stage("prefill").duration_s == 0   # none given
    finally:
        store.close()


def test_a_paused_trajectory_needs_no_prefill(tmp_path):
    store = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    log = TrajectoryLog(store, TID, must_survive="host_crash")
    log.append(task())
    log.append(ControlChanged(to_state="PAUSED", issuer="operator", request_id="pause-1", reason="review"))
    try:
        r = timed_resume(store, TID, prefill=PREFILL)
        assert r.record.control_state == "PAUSED"
        assert not r.timeline.prefill.needed and r.timeline.stage("prefill").duration_s == 0
        assert "PAUSED" in r.timeline.stage("prefill").detail
        assert r.timeline.stage("workspace_restore").source == "not run"       # no blob store, no workspace
    finally:
        store.close()


class CountingClock:
    def __init__(self):
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return float(self.calls)


def _unavailable(store, tmp_path, blobs, **kw):
    coord = SQLiteOwnershipCoordinator.open(tmp_path / "leases.sqlite")
    clock = CountingClock()
    fence = store.fence(TID)
    dest = tmp_path / "restored"
    try:
        with pytest.raises(ReconstructionUnavailableError) as exc:
            timed_resume(store, TID, blobs=blobs, coordinator=coord, workspace_dest=dest if blobs else None,
                         prefill=PREFILL, clock=clock, **kw)
        # nothing after the availability proof ran: the clock was read only around it, no lease
        # was granted, no fence installed, no file written
        assert clock.calls == 3
        assert coord.current(TID) is None and store.fence(TID) == fence and not dest.exists()
        return exc.value
    finally:
        coord.close()


def test_a_missing_checkpoint_object_makes_the_resume_unavailable(tmp_path):
    path, blobs, cap, _ = _build(tmp_path)
    Path(blobs.path_of(cap.record_sha256)).unlink()
    store = SQLiteStore.open(path, create=True)
    try:
        err = _unavailable(store, tmp_path, blobs)
        assert not err.availability.ok and cap.record_sha256[:16] in " ".join(err.availability.reasons)
    finally:
        store.close()


def test_a_truncated_or_gapped_log_makes_the_resume_unavailable(tmp_path):
    path, blobs, _, head = _build(tmp_path)
    db = sqlite3.connect(path)
    db.execute("DELETE FROM events WHERE sequence_number > ?", (head - 2,))
    db.commit()
    store = SQLiteStore.open(path, create=True)
    try:   # shorter than a position known to be acknowledged
        err = _unavailable(store, tmp_path, blobs, min_head=head)
        assert any("truncated" in r for r in err.availability.reasons)
    finally:
        store.close()
    db.execute("DELETE FROM events WHERE sequence_number = 3")
    db.commit()
    db.close()
    store = SQLiteStore.open(path, read_only=True)
    try:   # a hole in the middle
        err = _unavailable(store, tmp_path, blobs)
        assert not err.availability.ok
    finally:
        store.close()


def test_timed_resume_checks_its_arguments_before_touching_anything(tmp_path):
    path, blobs, _, _ = _build(tmp_path)
    store = SQLiteStore.open(path, create=True)
    fence = store.fence(TID)
    try:
        for kw, match in (({"workspace_dest": tmp_path / "w"}, "blob store"), ({"prefill": 5}, "PrefillModel"),
                          ({"reconcile": "yes"}, "callable"), ({"blobs": blobs, "clock": 3}, "clock")):
            with pytest.raises(ConfigError, match=match):
                timed_resume(store, TID, **kw)
        assert store.fence(TID) == fence and not (tmp_path / "w").exists()
    finally:
        store.close()


def _coord_and_store(tmp_path):
    path, blobs, _, _ = _build(tmp_path)
    return SQLiteStore.open(path, create=True), blobs, SQLiteOwnershipCoordinator.open(tmp_path / "leases.sqlite")


def test_timed_resume_refuses_bad_arguments_before_taking_ownership(tmp_path):
    """Fault model: a caller passes a workspace destination that holds files (or lies under a
    file), a clock that does not return a finite time, or a store/blob store of the wrong type.
    Invariant: arguments are checked before anything is owned. Goal: ConfigError with no lease
    granted, no fence moved and the destination untouched."""
    store, blobs, coord = _coord_and_store(tmp_path)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("precious")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    fence = store.fence(TID)
    cases = [
        ({"workspace_dest": full}, "not an empty directory"),
        ({"workspace_dest": a_file}, "not an empty directory"),
        ({"workspace_dest": a_file / "sub"}, "not a directory"),
        ({"workspace_dest": 5}, "workspace_dest"),
        ({"clock": lambda: math.nan}, "finite"),
        ({"clock": lambda: "now"}, "finite"),
        ({"clock": lambda: 10**400}, "finite"),
        ({"blobs": str(tmp_path / "blobs")}, "BlobStore"),
        ({"must_survive": "meteor_strike"}, "must_survive"),
    ]
    try:
        for kw, match in cases:
            kw = {"blobs": blobs, **kw}
            with pytest.raises(ConfigError, match=match):
                timed_resume(store, TID, coordinator=coord, owner_id="A", **kw)
        for bad_store in (None, str(tmp_path / "log.sqlite")):
            with pytest.raises(ConfigError, match="LogStore"):
                timed_resume(bad_store, TID, coordinator=coord)
        assert coord.current(TID) is None and store.fence(TID) == fence
        assert _files(full) == {"keep.txt": b"precious"} and not (a_file.is_dir())
        # the same call with an absent destination goes through
        r = timed_resume(store, TID, blobs=blobs, coordinator=coord, owner_id="A", workspace_dest=tmp_path / "new")
        assert r.owner_epoch == fence + 1 and _files(tmp_path / "new") == FILES_NOW
    finally:
        coord.close()
        store.close()


class ClockGoingBad:
    """Finite readings for ``good`` calls, then NaN."""

    def __init__(self, good: int):
        self.good, self.calls = good, 0

    def __call__(self) -> float:
        self.calls += 1
        return float(self.calls) if self.calls <= self.good else math.nan


def test_timed_resume_gives_its_lease_back_when_a_later_stage_fails(tmp_path):
    """Fault model: after the lease was granted and fenced, the reconcile callable raises, or
    the clock stops returning finite times. Invariant: the failed resume keeps no claim that
    blocks the next replacement. Goal: the error propagates, the lease is released (its epoch
    stays the log's fence), and the next owner is granted at once with a newer epoch."""
    store, blobs, coord = _coord_and_store(tmp_path)

    def boom(gate):
        raise RuntimeError("the executor query failed")
    try:
        with pytest.raises(RuntimeError, match="executor query"):
            timed_resume(store, TID, blobs=blobs, coordinator=coord, owner_id="A", reconcile=boom)
        first = coord.current(TID)
        assert first.owner_id == "A" and first.released and store.fence(TID) == first.owner_epoch
        with pytest.raises(ConfigError, match="finite"):   # readings 1-5: availability and ownership
            timed_resume(store, TID, blobs=blobs, coordinator=coord, owner_id="B", clock=ClockGoingBad(5))
        second = coord.current(TID)
        assert second.owner_id == "B" and second.released and second.owner_epoch == first.owner_epoch + 1
        r = timed_resume(store, TID, blobs=blobs, coordinator=coord, owner_id="C")   # no LeaseHeldError
        assert r.owner_epoch == second.owner_epoch + 1 and not coord.current(TID).released
    finally:
        coord.close()
        store.close()


def test_two_timed_resumes_racing_without_a_coordinator_never_share_an_epoch(tmp_path):
    """Fault model: two replacement workers resume the same SQLite log at once, without a
    coordinator, each on its own connection (as two processes). Every read of the fence waits
    for the other replacement's, which pins the interleaving in which both read the fence
    before either installs. Invariant: no two owners hold one epoch. Goal: the epochs differ,
    and the one with the older epoch is fenced out of the log."""
    import threading

    path, _, _, _ = _build(tmp_path)
    barrier = threading.Barrier(2)
    results: dict[str, tuple[int, SQLiteStore]] = {}
    errors: list[BaseException] = []

    def worker(name):
        st = SQLiteStore.open(path, create=True)
        read = st.fence

        def fence(tid):
            value = read(tid)
            try:
                barrier.wait(2.0)
            except threading.BrokenBarrierError:
                pass
            return value
        st.fence = fence
        try:
            blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
            results[name] = (timed_resume(st, TID, blobs=blobs).owner_epoch, st)
        except BaseException as exc:   # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
            st.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in "AB"]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    try:
        assert not errors and sorted(e for e, _ in results.values()) == [1, 2]
        older = min(results, key=lambda n: results[n][0])
        newer = "B" if older == "A" else "A"
        epoch, st = results[older]
        with pytest.raises(StaleOwnerError):
            TrajectoryLog(st, TID, must_survive="host_crash", owner_epoch=epoch).append(intent(op="late"))
        epoch, st = results[newer]
        TrajectoryLog(st, TID, must_survive="host_crash", owner_epoch=epoch).append(intent(op="next"))
    finally:
        for _, st in results.values():
            st.close()


# ------------------------------------------------------------------------------------------------
# timelines from data: inconsistent or mistyped input is refused
# ------------------------------------------------------------------------------------------------

BASE = ResumeTimeline.from_durations({n: 0.1 for n in STAGE_NAMES[:-1]}, prefill=PrefillModel(100, 0, 1000.0))


def _stage(d, name):
    return next(s for s in d["stages"] if s["name"] == name)


@pytest.mark.parametrize("mutate, match", [
    (lambda d: _stage(d, "prefill").update(end_s=_stage(d, "prefill")["start_s"] + 50.0), "disagree"),
    (lambda d: _stage(d, "prefill").update(measured=True), "cannot be measured"),
    (lambda d: _stage(d, "ownership").update(measured="false"), "measured"),
    (lambda d: _stage(d, "ownership").update(measured=1), "measured"),
    (lambda d: _stage(d, "ownership").update(detail=None), "detail"),
    (lambda d: _stage(d, "ownership").update(detail=7), "detail"),
    (lambda d: d.update(clock=None), "clock"),
    (lambda d: d.update(clock=5), "clock"),
    (lambda d: _stage(d, "ownership").update(start_s=-1e6), "start_s"),
    (lambda d: _stage(d, "ownership").update(end_s=math.inf), "end_s"),
    (lambda d: _stage(d, "ownership").update(end_s=1e300), "end_s"),
    (lambda d: _stage(d, "ownership").update(start_s=10**400), "start_s"),
    (lambda d: d["prefill"].update(no_prefill_reason="paused"), "no tokens"),
    (lambda d: d["prefill"].update(prefill_s=3.0), "disagrees"),
    (lambda d: d["prefill"].update(prefill_tokens_per_s=10**400), "prefill_tokens_per_s"),
    (lambda d: _stage(d, "fold").update(depends_on=None), "depends_on"),
    (lambda d: _stage(d, "fold").update(depends_on=5), "depends_on"),
    (lambda d: _stage(d, "fold").update(depends_on="checkpoint_suffix_read"), "depends_on"),
    (lambda d: _stage(d, "fold").update(depends_on=[3]), "depends_on"),
    (lambda d: d.update(availability_s=10**400), "availability_s"),
])
def test_timeline_from_dict_refuses_inconsistent_or_mistyped_data(mutate, match):
    import json

    d = json.loads(json.dumps(BASE.to_dict()))
    assert ResumeTimeline.from_dict(d) == BASE
    mutate(d)
    with pytest.raises(ConfigError, match=match):
        ResumeTimeline.from_dict(d)


def test_bad_arguments_to_the_timeline_api_are_config_errors():
    durations = {n: 0.1 for n in STAGE_NAMES}
    for call, match in [
        (lambda: PrefillModel(100, 0, 10**400), "prefill_tokens_per_s"),
        (lambda: PrefillModel(10**12, 0, 1e-6), "too small"),              # 1e18 s: finite, but absurd
        (lambda: ResumeTimeline.from_durations(durations, prefill="x"), "PrefillModel"),
        (lambda: ResumeTimeline.from_durations(None), "durations_s"),
        (lambda: ResumeTimeline.from_durations(durations, measured="yes"), "measured"),
        (lambda: ResumeTimeline.from_durations(durations, measured={"fold": "yes"}), "measured"),
        (lambda: ResumeTimeline.from_durations(durations, depends_on={"fold": "ownership"}), "depends_on"),
        (lambda: ResumeTimeline.from_durations(durations, details={"nowhere": "x"}), "unknown stage"),
        (lambda: ResumeTimeline.from_durations({**durations, "fold": 10**400}), "fold"),
        (lambda: ResumeTimeline(None), "list or tuple"),
        (lambda: ResumeTimeline("stages"), "list or tuple"),
        (lambda: Stage("reconciliation", 0, 1, "fold"), "depends_on"),
        (lambda: Stage("fold", 0, 1, measured=None), "measured"),
    ]:
        with pytest.raises(ConfigError, match=match):
            call()
    # a list of names is still fine, and becomes a tuple
    assert Stage("reconciliation", 0, 1, ["fold", "ownership"]).depends_on == ("fold", "ownership")
    paused = ResumeTimeline.from_durations({n: 0.1 for n in STAGE_NAMES[:-1]}, prefill=PrefillModel.none("paused"))
    assert ResumeTimeline.from_dict(paused.to_dict()) == paused


# ------------------------------------------------------------------------------------------------
# the widget
# ------------------------------------------------------------------------------------------------

HAND = {"ownership": 0.004, "checkpoint_suffix_read": 0.001, "fold": 0.0005, "workspace_restore": 0.002,
        "reconciliation": 0.03}


def test_widget_recomputes_prefill_and_totals_from_good_givens():
    from widgets import ResumeTimelineView

    base = ResumeTimeline.from_durations(HAND, prefill=PREFILL)
    w = ResumeTimelineView(base, draw_svg=False)
    assert w.error == "" and w.readout["durations_s"]["prefill"] == pytest.approx(PREFILL.prefill_s)
    assert w.update(context_tokens=50_000, cached_prefix_tokens=10_000, prefill_tokens_per_s=8000.0)
    want = (50_000 - 10_000) / 8000.0
    assert w.readout["durations_s"]["prefill"] == pytest.approx(want)
    assert w.readout["serial_sum_s"] == pytest.approx(sum(HAND.values()) + want)
    assert w.readout["critical_path_s"] == pytest.approx(
        max(HAND["ownership"], HAND["checkpoint_suffix_read"] + HAND["fold"]) + HAND["reconciliation"] + want)
    w.cached_prefix_tokens = 50_000                       # everything cached: no tokens to prefill
    assert w.error == "" and w.readout["durations_s"]["prefill"] == 0
    assert w.readout["critical_path"] == ["ownership", "reconciliation", "prefill"]
    w.context_tokens = 60_000.0                           # a whole float from a number box
    assert w.context_tokens == 60_000 and type(w.context_tokens) is int
    assert w.readout["durations_s"]["prefill"] == pytest.approx(10_000 / 8000.0)
    # measured stages never move
    assert {k: v for k, v in w.readout["durations_s"].items() if k != "prefill"} == pytest.approx(HAND)
    row = next(r for r in w.stages if r["stage"] == "prefill")
    assert row["source"] == PREFILL_LABEL and w.timeline.prefill == w.prefill


@pytest.mark.parametrize("name, bad", [
    ("context_tokens", -1), ("context_tokens", 1.5), ("context_tokens", None), ("context_tokens", "8k"),
    ("context_tokens", math.nan), ("context_tokens", 10**400), ("context_tokens", 100),   # < cached
    ("cached_prefix_tokens", 9000), ("cached_prefix_tokens", -3), ("prefill_tokens_per_s", 0),
    ("prefill_tokens_per_s", -1.0), ("prefill_tokens_per_s", math.inf), ("prefill_tokens_per_s", True),
])
def test_widget_refuses_bad_givens_and_keeps_the_previous_value(name, bad):
    from widgets import ResumeTimelineView

    w = ResumeTimelineView(ResumeTimeline.from_durations(HAND, prefill=PREFILL), draw_svg=False)
    before = {n: getattr(w, n) for n in ("context_tokens", "cached_prefix_tokens", "prefill_tokens_per_s")}
    readout, revision = dict(w.readout), w.revision
    setattr(w, name, bad)                                  # never raises
    assert name in w.error and "kept the previous value" in w.error and len(w.error) < 300
    assert {n: getattr(w, n) for n in before} == before
    assert w.readout == readout and w.revision == revision
    assert w.update(**before) and w.error == ""


def test_widget_draws_svg_and_keeps_widget_conventions():
    from widgets.resume_timeline import OVERLAPPED, SERIAL, ResumeTimelineView

    w = ResumeTimelineView(ResumeTimeline.from_durations(HAND, prefill=PREFILL))
    assert w.chart_svg.lstrip().startswith("<svg") and "</svg>" in w.chart_svg
    for name in STAGE_NAMES:
        assert name in w.chart_svg
    titles = [c["title"]["text"] for c in w.chart_spec["vconcat"]]
    assert titles == [SERIAL, OVERLAPPED]
    assert "lmSuppressShortcuts" in w._esm and "stopPropagation" in w._esm
    assert any("serial sum" in line for line in w.readout_lines)
    assert any(line.startswith("prefill:") and PREFILL_LABEL in line for line in w.readout_lines)
    old_svg = w.chart_svg
    w.prefill_tokens_per_s = 1000.0
    assert w.chart_svg != old_svg and f"{(8192 - 6144) / 1000.0 * 1e3:.3f} ms" in w.chart_svg


def test_widget_on_a_resume_without_prefill_says_so_until_a_given_moves():
    from widgets import ResumeTimelineView

    tl = ResumeTimeline.from_durations(HAND, prefill=PrefillModel.none("inspection only"))
    w = ResumeTimelineView(tl, draw_svg=False)
    assert "inspection only" in w.notice and w.readout["durations_s"]["prefill"] == 0
    w.prefill_tokens_per_s = 10_000.0
    assert w.notice == "" and w.readout["durations_s"]["prefill"] == pytest.approx((8192 - 6144) / 10_000.0)
    with pytest.raises(ConfigError):
        ResumeTimelineView({"stages": []})
    with pytest.raises(ConfigError):
        ResumeTimelineView(tl, context_tokens=-5)


@pytest.mark.parametrize("givens, name", [
    ({"context_tokens": 10**12, "cached_prefix_tokens": 0, "prefill_tokens_per_s": 1e-296}, "context_tokens"),
    ({"prefill_tokens_per_s": 1e-296}, "prefill_tokens_per_s"),
    ({"prefill_tokens_per_s": 0.5}, "prefill_tokens_per_s"),
    ({"context_tokens": 10**8 + 1}, "context_tokens"),
])
def test_widget_refuses_givens_that_make_the_prefill_absurd(givens, name):
    """Givens the PrefillModel takes but that put the prefill at ~1e308 s (``inf ms`` in the
    chart, non-JSON numbers in the synced traits) are refused like any out-of-range value."""
    import json

    from widgets import ResumeTimelineView

    for draw in (False, True):
        w = ResumeTimelineView(ResumeTimeline.from_durations(HAND, prefill=PREFILL), draw_svg=draw)
        before = {n: getattr(w, n) for n in ("context_tokens", "cached_prefix_tokens", "prefill_tokens_per_s")}
        readout, revision = dict(w.readout), w.revision
        if len(givens) == 1:
            setattr(w, *next(iter(givens.items())))
        else:
            assert not w.update(**givens)
        assert name in w.error and "kept the previous value" in w.error
        assert {n: getattr(w, n) for n in before} == before and w.readout == readout and w.revision == revision
        for trait in ("stages", "chart_spec", "readout"):
            json.dumps(getattr(w, trait), allow_nan=False)
    # the edges are taken
    w = ResumeTimelineView(ResumeTimeline.from_durations(HAND, prefill=PREFILL), draw_svg=False)
    assert w.update(context_tokens=10**8, cached_prefix_tokens=0, prefill_tokens_per_s=1.0)
    assert w.readout["durations_s"]["prefill"] == 1e8 and math.isfinite(w.readout["serial_sum_s"] * 1e3)


def test_worker_refuses_bad_prefill_givens_before_reading_anything(tmp_path, capsys):
    import kernel_lib.live.worker as worker

    path = tmp_path / "absent.sqlite"
    rc = worker.main(["--recover", "--store", "sqlite", "--store-path", str(path), "--prefill-tokens-per-s", "0"])
    assert rc == 2 and "prefill_tokens_per_s" in capsys.readouterr().err and not path.exists()
