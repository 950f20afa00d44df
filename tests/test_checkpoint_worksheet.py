"""The crash worksheet's checkpoint (§11.4.1, §11.5.2), on a real SQLite log, real blob files and the
real ws_r18 snapshot (datasets/repair_r18 + patch r18).

Fault model: the checkpoint at p binds record_R_ckpt to workspace ws_r18; the suffix logs the model
call (prompt, reply, usage), the budget reservations and the durable intent for test_r18/attempt1;
the worker dies while the test runs, before any result is logged.
Invariant: restore calls no model and no tool, and rebuilds exactly what folding the whole log
gives: test_r18 in doubt with its reservation held and no job handle, and the workspace byte for
byte ws_r18 (its content digest).
Goal: the replacement starts from the checkpoint and folds only the suffix.
"""

from __future__ import annotations

import json

import pytest

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, load_tree
import kernel_lib.checkpoint.restore as restore
from kernel_lib.gate.dispatch import DispatchGate, ModelCall, ToolProposal
from kernel_lib.errors import UnrecoverableStateError
from kernel_lib.sim.model import MODEL_NAME, StochasticModel, repair_prompt
from kernel_lib.live.workspace import build_snapshot, manifest_digest, manifest_of
from kernel_lib.live.worker import GRANT, OPERATION, TRAJECTORY, policy, task
from kernel_lib.log import SQLiteStore, TrajectoryLog
from kernel_lib.core.record import fold, initial_record


class WorkerDied(BaseException):
    """Stands in for the SIGKILL of the worker while the test runs."""


def _run_until_the_worker_dies(tmp_path):
    snap = build_snapshot(tmp_path / "snapshots")
    store = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    log = TrajectoryLog(store, TRAJECTORY)
    gate = DispatchGate(log, policy())
    gate.start(task(snap.digest))
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    ckpt = Checkpointer(log, blobs).capture(gate.record, snap.path, kind="full")
    gate.record = fold(gate.record, [ckpt.event])     # the gate's live record takes the Checkpoint event too
    model = StochasticModel(7)
    gate.run_model(ModelCall(invocation_id="model_call_1", model=MODEL_NAME, delivered_input=repair_prompt(snap.ref),
                             grant_id=GRANT, cost_bound_usd=0.20), lambda ctx: model.reply(ctx.delivered_input))

    def transport(intent):
        raise WorkerDied   # the request is out; the worker is gone before any reply is logged

    with pytest.raises(WorkerDied):
        gate.run_tool(ToolProposal(operation_id=OPERATION, attempt_id="attempt1", tool="run_tests",
                                   arguments={"snapshot_digest": snap.digest}, grant_id=GRANT, cost_bound_usd=0.50,
                                   repeat_contract="idempotency_key", input_ref=snap.ref, revision="r18"), transport)
    store.close()
    return snap, ckpt


def test_restore_after_the_worker_dies_mid_test(tmp_path, monkeypatch):
    snap, ckpt = _run_until_the_worker_dies(tmp_path)

    # the replacement: nothing may call a model or a tool while restoring
    def forbidden(*a, **k):
        raise AssertionError("restore called a model or a tool")
    monkeypatch.setattr(DispatchGate, "run_model", forbidden)
    monkeypatch.setattr(DispatchGate, "run_tool", forbidden)
    monkeypatch.setattr(StochasticModel, "reply", forbidden)

    store = SQLiteStore.open(tmp_path / "log.sqlite", read_only=True)
    try:
        res = restore(store, TRAJECTORY, DirectoryBlobStore(str(tmp_path / "blobs")), dest=tmp_path / "restored")
        events = list(store.read(TRAJECTORY))
    finally:
        store.close()

    # the checkpoint at p binds record_R_ckpt (the started task, nothing admitted) to ws_r18
    assert res.checkpoint.checkpoint_id == ckpt.checkpoint_id and ckpt.covered_sequence_number == 1
    assert res.checkpoint.tree_sha256 == res.tree_sha256
    suffix = [e.event_type for e in events[ckpt.covered_sequence_number:]]
    assert suffix[0] == "Checkpoint" and suffix[-1] == "ToolIntent"
    assert {"ContextBuilt", "ModelReplied", "BudgetReserved", "BudgetSettled", "Authorized"} <= set(suffix)
    assert res.suffix_events == len(suffix)

    # the record: test_r18 in doubt, its reservation held, no job handle (lost with the worker)
    rec = res.record
    assert rec.in_doubt() == [OPERATION]
    op = rec.operations[OPERATION]
    assert op.status == "in_doubt" and op.current_attempt_id == "attempt1" and op.job_handle is None
    assert rec.budget.outstanding_reservations == {"res-test_r18/attempt1": pytest.approx(0.5)}
    assert rec.operations["model_call_1"].status == "established"
    assert rec.to_dict() == fold(initial_record(TRAJECTORY), events).to_dict()

    # the workspace: byte for byte ws_r18
    assert manifest_digest(manifest_of(tmp_path / "restored")) == snap.digest
    assert rec.task["workspace_ref"] == snap.ref


def test_a_lost_workspace_blob_fails_the_restore_instead_of_giving_another_tree(tmp_path):
    """Fault: a file blob of ws_r18 is lost from the blob store. Invariant: restore names it and
    writes nothing, rather than hand the replacement some other workspace."""
    snap, ckpt = _run_until_the_worker_dies(tmp_path)
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    manifest = json.loads(blobs.get(ckpt.manifest_sha256))
    tree = load_tree(blobs, manifest["workspace"]["tree"])
    victim = tree.files["stats.py"].sha256
    (tmp_path / "blobs" / victim[:2] / victim).unlink()
    store = SQLiteStore.open(tmp_path / "log.sqlite", read_only=True)
    try:
        with pytest.raises(UnrecoverableStateError, match="stats.py") as exc:
            restore(store, TRAJECTORY, DirectoryBlobStore(str(tmp_path / "blobs")), dest=tmp_path / "restored")
        assert exc.value.missing[0][0] == "file blob"
        assert not (tmp_path / "restored").exists()
    finally:
        store.close()
