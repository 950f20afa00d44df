"""One durable barrier per tool step where the endpoint's contract allows it (issue 15; §11.3.1,
§11.3.3, §11.5.3).

Barriers are counted by the file system the segment store calls (``fdatasync``), not by the gate.
"""

from __future__ import annotations

import sqlite3

import pytest

from kernel_lib.core.events import ToolIntent, ToolIntentV2, decode
from kernel_lib.errors import ConfigError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.core.events import TaskStarted
from kernel_lib.log import FailureDomain, SQLiteStore, TrajectoryLog
from tests.helpers import FdatasyncCountingFS as CountingFS
from kernel_lib.log.segment import SegmentStore
from kernel_lib.verify.barrier_workload import OneBarrierWorkload
from kernel_lib.verify.engine import explore

TRAJ = "traj-barrier-test"
POLICY = AdmissionPolicy(grants={"g": {"run_check"}})
REPLY = ToolReply(status="completed", outcome={"passed": True}, observation_complete=True)


def _gate(store) -> tuple[DispatchGate, TrajectoryLog]:
    log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.HOST_CRASH)
    gate = DispatchGate(log, POLICY, coalesce_admission=True)
    gate.start(TaskStarted(task_id="t", requester="r", objective="o", grant_ids=["g"], budget_ceiling_usd=1.0))
    return gate, log


def _proposal(i: int, lookup: bool) -> ToolProposal:
    return ToolProposal(f"op-{i}", "attempt1", "run_check", {"i": i}, "g", 0.0, status_lookup=lookup)


def _barriers_per_step(tmp_path, lookup: bool, steps: int = 6) -> float:
    fs = CountingFS()
    store = SegmentStore.open(str(tmp_path / f"seg-{lookup}"), fs=fs, create=True)
    try:
        gate, _ = _gate(store)
        before = fs.fdatasyncs
        for i in range(steps):
            gate.run_tool(_proposal(i, lookup), lambda intent: REPLY)
        return (fs.fdatasyncs - before) / steps
    finally:
        store.close()


def test_a_step_whose_endpoint_answers_a_status_lookup_waits_for_one_barrier(tmp_path):
    """Situation: tool steps on the segment log at the fdatasync tier, endpoint declaring a
    status lookup by operation id. Invariant: the evidence rides the next intent's barrier.
    Goal: fdatasyncs counted by the file system: 1 per step (the last step's evidence is still
    uncovered, so the count over n steps is n)."""
    assert _barriers_per_step(tmp_path, lookup=True) == 1.0


def test_an_endpoint_without_a_declared_status_lookup_keeps_its_evidence_at_fdatasync(tmp_path):
    """Fault model: host crash; the endpoint declares nothing (the dangerous default).
    Invariant: its evidence is durable before the step returns. Goal: 2 fdatasyncs per step,
    and a proposal that declares a non-bool lookup is refused."""
    assert _barriers_per_step(tmp_path, lookup=False) == 2.0
    with pytest.raises(ConfigError):
        ToolProposal("x", "a", "run_check", {}, "g", 0.0, status_lookup="yes")


def test_nothing_leaves_while_deferred_evidence_is_unsynced_and_sync_covers_the_last(tmp_path):
    """Fault model: host crash between a reply and the next dispatch. Invariant: when a request
    leaves, every byte of the log is covered by a completed fdatasync (the deferred evidence of
    the step before included). Goal: at each dispatch the store's synced watermark is its end;
    after the last step the log's durable head lags its head until ``gate.sync()``, which costs
    one barrier (a second sync costs none)."""
    fs = CountingFS()
    store = SegmentStore.open(str(tmp_path / "seg"), fs=fs, create=True)
    try:
        gate, log = _gate(store)
        seen = []

        def endpoint(intent):
            seen.append(store.synced_watermark == store.end_position)
            return REPLY

        for i in range(4):
            gate.run_tool(_proposal(i, True), endpoint)
        assert seen == [True] * 4
        assert log.durable_head < log.head
        n = fs.fdatasyncs
        assert gate.sync() == log.head and fs.fdatasyncs == n + 1
        assert store.synced_watermark == store.end_position
        gate.sync()
        assert fs.fdatasyncs == n + 1
    finally:
        store.close()


def test_the_declaration_is_in_the_log_and_older_intents_keep_their_bytes(tmp_path):
    """Situation: a reader of the log must see which tier a step's evidence was acknowledged at.
    Invariant: the intent (schema 3) records ``status_lookup``; a schema-2 intent still decodes to
    its own bytes. Goal: stored intent bytes carry the flag; a v2 re-stamp round-trips."""
    store = SegmentStore.open(str(tmp_path / "seg"), create=True)
    try:
        gate, _ = _gate(store)
        gate.run_tool(_proposal(1, True), lambda i: REPLY)
        gate.run_tool(_proposal(2, False), lambda i: REPLY)
        intents = [e for e in store.read(TRAJ) if isinstance(e.payload, ToolIntent)]
        assert [e.schema_version for e in intents] == [3, 3]
        assert [e.payload.status_lookup for e in intents] == [True, False]
        assert b'"status_lookup":true' in intents[0].canonical
        fields = intents[1].payload.model_dump(exclude={"status_lookup"})
        v2 = intents[1].restamp(payload=ToolIntentV2(**fields))
        assert v2.schema_version == 2 and b"status_lookup" not in v2.canonical
        back = decode(v2.canonical)
        assert type(back.payload) is ToolIntentV2 and back == v2 and back.payload.status_lookup is False
    finally:
        store.close()


def test_sqlite_commits_under_normal_and_a_barrier_is_an_fdatasync_of_the_wal(tmp_path, monkeypatch):
    """Fault model: host crash after a barrier that followed write-tier commits. Invariant: every
    commit runs under synchronous=NORMAL (the WAL is synced before any checkpoint and the database
    before the WAL is reused), never OFF, under which a checkpoint + WAL reuse escapes the next
    barrier; a barrier append returns only after an fdatasync of the store's ``-wal`` file that
    started after its commit, and a write-tier append issues none. Goal: NORMAL after deferred and
    barrier appends; fdatasyncs of the WAL counted per append (0 for deferred evidence, 1 per
    barrier); the SQLite gate also pays one barrier per step."""
    import os
    synced: list[str] = []
    real = os.fdatasync

    def counting(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)
    monkeypatch.setattr(os, "fdatasync", counting)
    store = SQLiteStore(tmp_path / "log.sqlite", create=True)
    try:
        gate, log = _gate(store)
        assert log.can_defer
        gate.run_tool(_proposal(1, True), lambda i: REPLY)
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1   # NORMAL
        before, b = len(synced), log.barriers
        gate.run_tool(_proposal(2, True), lambda i: REPLY)   # intent: one barrier; evidence deferred
        assert log.barriers == b + 1 and len(synced) == before + 1
        assert synced[-1] == str(tmp_path / "log.sqlite-wal")
        gate.sync()
        assert len(synced) == before + 2
        assert gate.sync() == log.head and len(synced) == before + 2   # nothing uncovered: no barrier
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1   # still NORMAL
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "log.sqlite") as db:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == log.head


def test_crash_states_of_one_barrier_steps_weaken_no_acknowledged_promise():
    """Fault model: process and host crashes (dropped, reordered, torn unsynced writes) at every
    file operation of a run of tool steps. Invariants: no phantom effect; every fdatasync
    acknowledgment survives; lost evidence only from a status-lookup endpoint, settled by
    reconciliation; continuation never invokes an unsafe operation twice (the endpoint's count).
    Goal: zero violations, and some states really lost write-tier evidence that reconciliation
    recovered; a gate that defers evidence of an endpoint without a lookup is caught."""
    report = explore([OneBarrierWorkload(), OneBarrierWorkload(defer_everything=True)], seed=3)
    good, broken = report.rows["one-barrier-steps"], report.rows["one-barrier-steps-broken"]
    assert good.violations == 0, report.violation_details[:3]
    assert good.counts["evidence_lost_reconciled"] > 0
    assert broken.violations > 0


def test_evidence_is_deferred_only_for_an_attempt_whose_intent_declared_a_status_lookup(tmp_path):
    """Fault model: a caller (an adapter, a resumed worker) asks the gate to defer evidence of an
    attempt whose endpoint never declared a status lookup, or passes a truthy non-bool. Invariant:
    only an intent appended with ``status_lookup`` true lets its evidence ride the next barrier;
    everything else takes its own barrier. Goal: counted by the file system, the undeclared
    attempt's evidence costs an fdatasync even with ``reconcilable=True``; a non-bool is refused."""
    fs = CountingFS()
    store = SegmentStore.open(str(tmp_path / "seg"), fs=fs, create=True)
    try:
        gate, log = _gate(store)
        accepted = ToolReply(status="accepted", outcome=None, observation_complete=False, job_handle="job-0")
        gate.run_tool(_proposal(0, False), lambda intent: accepted)
        before = fs.fdatasyncs
        gate.record_evidence("op-0", "attempt1", REPLY, reconcilable=True)
        assert fs.fdatasyncs == before + 1 and log.durable_head == log.head
        with pytest.raises(ConfigError, match="reconcilable"):
            gate.record_evidence("op-0", "attempt1", REPLY, reconcilable=1)
    finally:
        store.close()


def test_a_failed_sqlite_barrier_fails_the_store_until_reopened(tmp_path, monkeypatch):
    """Fault model: the fdatasync of the WAL fails (EIO). Invariant: the append is not
    acknowledged and no later append is (a barrier after a failed one proves nothing: the kernel
    may have dropped the dirty pages); a reopened store takes appends again. Goal:
    StoreFailedError for the barrier append, the next write-tier one and a fence."""
    import errno
    import os

    from kernel_lib.errors import StoreFailedError
    from kernel_lib.log import AckTier
    from kernel_lib.sim.events import sample_intent_events

    evs = sample_intent_events("t", 3)
    store = SQLiteStore(tmp_path / "log.sqlite", create=True)
    store.append_batch([evs[0]], AckTier.FDATASYNC)
    real = os.fdatasync

    def failing(fd):
        raise OSError(errno.EIO, "injected")
    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StoreFailedError, match="fdatasync"):
        store.append_batch([evs[1]], AckTier.FDATASYNC)
    monkeypatch.setattr(os, "fdatasync", real)
    with pytest.raises(StoreFailedError, match="reopen"):
        store.append_batch([evs[2]], AckTier.WRITE)
    with pytest.raises(StoreFailedError):
        store.install_fence("t", 2)
    store.close()
    again = SQLiteStore(tmp_path / "log.sqlite")
    try:
        head = again.head("t")
        assert head in (1, 2)
        (res,) = again.append_batch([evs[head]], AckTier.FDATASYNC)
        assert res.sequence_number == head + 1
    finally:
        again.close()
