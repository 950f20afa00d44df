"""One durable barrier per step in the live worker and the crash sweep (issue 15; §11.3.1, §11.5.3).

Fault model: the worker process is killed by a real SIGKILL right after test_r18's deferred
evidence was acknowledged at the log's write tier and before the log's next barrier (a process
crash: the written bytes survive in the page cache). Host crashes that lose such evidence are the
crash-state exploration's (tests/test_one_barrier.py, ``crashcheck --workload one-barrier-steps``).
Invariant: the executor's own invocation counter stays within the repeat contract, and deferred
evidence the replacement does not find is settled by reconciliation; the worker makes deferred
evidence durable (one barrier) before it reports, releases its lease or exits.
Goal: the worker defers exactly the evidence of the endpoint that declares a status lookup, as
the executor declares it at ``GET /contract``.
"""

from __future__ import annotations

import json
import os
import signal

import httpx
import pytest

from kernel_lib.core.events import ToolIntent
from kernel_lib.live import controller
from kernel_lib.live import worker as worker_mod
from kernel_lib.live.crash_points import CrashPoint
from kernel_lib.live.executor import ENDPOINT_CONTRACT
from kernel_lib.live.sweep import deferred_uncovered, find_unsettled_losses
from kernel_lib.live.workspace import build_snapshot
from kernel_lib.log import open_store
from tests.helpers import FdatasyncCountingFS as CountingFS
from kernel_lib.log.segment import SegmentStore

from .conftest import DURABLE_KINDS

OP = worker_mod.OPERATION


# ------------------------------------------------------------------------------------------------
# the declaration and the points it makes
# ------------------------------------------------------------------------------------------------


def _client(handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_the_worker_takes_a_status_lookup_only_from_the_executors_declaration():
    """Situation: the worker asks the executor what its endpoint promises. Invariant: only an
    explicit ``status_lookup: true`` for run_tests counts; silence, an error or anything else is
    no lookup (evidence then waits for its own barrier). Goal: the package's executor declares it."""
    assert ENDPOINT_CONTRACT["status_lookup"] is True and ENDPOINT_CONTRACT["tool"] == "run_tests"
    said = worker_mod.endpoint_contract(_client(lambda r: httpx.Response(200, json=ENDPOINT_CONTRACT)), "http://x")
    assert said["status_lookup"] is True and "/contract" in said["declared_by"]
    for body in ({}, {"status_lookup": "yes", "tool": "run_tests"}, {"status_lookup": True, "tool": "other"}, [1]):
        c = _client(lambda r, body=body: httpx.Response(200, json=body))
        assert worker_mod.endpoint_contract(c, "http://x")["status_lookup"] is False, body

    def down(request):
        raise httpx.ConnectError("refused")

    assert worker_mod.endpoint_contract(_client(down), "http://x")["status_lookup"] is False


def test_the_crash_points_mark_test_r18s_evidence_deferred_and_nothing_else():
    """Situation: the reference trajectory through the same gate, with the executor's
    declaration. Invariant: only test_r18's evidence batches are deferred (never an intent or a
    model call's events), and a kill after them finds them uncovered until the final sync.
    Goal: positions after the deferred result and before the next barrier are kill points."""
    points = worker_mod.crash_points()
    deferred = [p for p in points if p.deferred]
    assert deferred and {p.subject for p in deferred} == {OP}
    assert {p.event_type for p in deferred} == {"ToolResult", "BudgetSettled"}
    intent = next(p for p in points if p.event_type == "ToolIntent")
    assert not intent.deferred and all(p.position > intent.position for p in deferred)
    assert all("[written, not synced until the next barrier]" in p.describe() for p in deferred)
    assert all(p.to_dict()["deferred"] for p in deferred)
    last = points[-1]
    assert [p.position for p in deferred_uncovered(points, last.position)] == [p.position for p in deferred]
    assert deferred_uncovered(points, intent.position) == []


def test_lost_deferred_evidence_is_a_violation_unless_reconciliation_settled_it():
    """Invariant: deferred evidence the replacement did not find must be settled by
    reconciliation (verified evidence recorded). Goal: the rule fires on an unsettled loss."""
    lost = [{"position": 10, "subject": OP}]
    assert find_unsettled_losses([{"position": 10, "deferred_lost": lost,
                                   "reconciled": {OP: "recorded verified evidence"}}]) == []
    assert find_unsettled_losses([{"position": 10, "deferred_lost": lost, "reconciled": {OP: "kept in doubt"}}]) == [
        {"position": 10, "kind": "lost_evidence_unsettled", "operation_id": OP, "lost_position": 10,
         "action": "kept in doubt"}]
    assert find_unsettled_losses([{"position": 10, "deferred_lost": [], "reconciled": {}}]) == []
    pts = (CrashPoint(1, "A", 1, None), CrashPoint(2, "B", 1, OP, deferred=True), CrashPoint(3, "C", 1, None),
           CrashPoint(4, "D", 1, OP, deferred=True), CrashPoint(5, "E", 1, OP, deferred=True))
    assert [p.position for p in deferred_uncovered(pts, 2)] == [2]
    assert deferred_uncovered(pts, 3) == []
    assert [p.position for p in deferred_uncovered(pts, 5)] == [4, 5]


# ------------------------------------------------------------------------------------------------
# real processes
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("store_kind", DURABLE_KINDS)
def test_sigkill_after_deferred_evidence_before_the_next_barrier(store_kind, tmp_path):
    """Fault model: SIGKILL right after test_r18's acceptance was acknowledged at the write tier
    (the marker says so: the durable head is still the intent's position). Invariant: a process
    crash loses no acknowledged write, so the replacement finds the acceptance; the executor
    counts the one invocation; reconciliation settles the operation. Goal: the log's intent
    records the endpoint's declaration."""
    point = next(p for p in worker_mod.crash_points() if p.deferred)
    env = controller.live_env()
    snap = build_snapshot(tmp_path / "snapshots")
    store_path = tmp_path / ("log.sqlite" if store_kind == "sqlite" else "log_segments")
    executor, ready = controller.spawn_executor(tmp_path, snap, usd_per_s=0.01, test_delay_s=0.5, env=env,
                                                timeout_s=60)
    proc = None
    try:
        proc, paused = controller.spawn_worker(tmp_path, store_kind=store_kind, store_path=store_path, ready=ready,
                                               digest=snap.digest, seed=0, pause_at=str(point.position), env=env,
                                               timeout_s=60)
        assert paused["log_position"] == point.durable_at and paused["deferred"] is True
        assert paused["durable_head"] < point.position
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -9
        out = controller.run_replacement(store_kind=store_kind, store_path=store_path, ready=ready, seed=0,
                                         reconcile=True, reconcile_timeout_s=60, step_timeout_s=60, env=env)
        assert out["recovered"]["log_position"] == point.durable_at      # the deferred evidence was found
        assert out["recovered"]["operations"][OP]["last_result_status"] == "accepted"
        assert out["reconciled"]["actions"][OP]["action"] == "recorded verified evidence"
        inv = controller.executor_invocations(ready["url"], store_kind, store_path)
        assert inv[OP]["invocations"] == 1 and inv[OP]["repeat_contract"] == "idempotency_key"
        with open_store(store_kind, store_path, read_only=True) as st:
            intents = [e.payload for e in st.read(worker_mod.TRAJECTORY) if isinstance(e.payload, ToolIntent)]
        assert [i.status_lookup for i in intents] == [True]
    finally:
        if proc is not None:
            controller.kill_group(proc)
        controller.stop_executor(executor)


def test_the_worker_makes_deferred_evidence_durable_before_it_exits(tmp_path, monkeypatch, capsys):
    """Fault model: a host crash right after the worker reported and exited. Invariant: nothing
    the worker acknowledged is uncovered when it reports: its last act on the log is a barrier.
    Goal: on the segment store, whose file system counts the fdatasyncs, the store is synced to
    its end when the worker closes it, at one barrier per non-deferred batch plus one."""
    fs = CountingFS()
    seen: dict[str, object] = {}

    def open_counting(kind, path, create=False, **kw):
        store = SegmentStore.open(str(path), fs=fs, create=create)
        seen["opened_at"] = fs.fdatasyncs
        close = store.close

        def closing():
            seen["synced_at_close"] = store.synced_watermark == store.end_position
            seen["fdatasyncs"] = fs.fdatasyncs - seen["opened_at"]
            close()

        store.close = closing
        return store

    monkeypatch.setattr(worker_mod, "open_store", open_counting)
    env = controller.live_env()
    snap = build_snapshot(tmp_path / "snapshots")
    executor, ready = controller.spawn_executor(tmp_path, snap, usd_per_s=0.01, test_delay_s=0.0, env=env,
                                                timeout_s=60)
    try:
        args = worker_mod.build_parser().parse_args(
            ["--store", "segment", "--store-path", str(tmp_path / "seg"), "--executor-url", ready["url"],
             "--public-key", ready["public_key_path"], "--snapshot-digest", snap.digest, "--poll-interval-s", "0.02"])
        assert worker_mod.run_worker(args) == 0
    finally:
        controller.stop_executor(executor)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["record"]["operations"][OP]["status"] == "established"
    assert out["endpoint_contract"]["status_lookup"] is True
    assert seen["synced_at_close"] is True
    points = worker_mod.crash_points()
    barrier_batches = {p.durable_at for p in points if not p.deferred}
    assert seen["fdatasyncs"] == len(barrier_batches) + 1 == out["durability"]["barriers"]
    assert out["durability"]["durable_head"] == out["durability"]["head"] == points[-1].position
