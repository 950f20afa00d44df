"""The claims notebook 11.9 (§11.9 fallacies and pitfalls) rests on, checked outside the notebook.

Each test names the fallacy or pitfall it backs, the fault model, and the invariant:

* the final context window loses a compacted observation while the log rebuilds every delivered
  input, and one final window fits several different logs;
* a checkpoint after every turn costs what Napkin Math 11.1 says, far above the balance stride;
* a fresh sample of the stand-in differs while the fold returns the recorded replies, and one flipped
  call makes every later boundary differ in exactly the way the notebook explains;
* a replica is never certified, whatever its lag, so absence there never proves non-dispatch;
* a new owner_epoch fences stale appends but leaves a delivered operation in doubt until signed
  evidence settles it; the endpoint's contract, not the epoch, licenses a retry;
* a cold prefill of the chapter's context is priced from its compute floor (a lower bound), and the
  queue-versus-cold verdict flips only past the computed slow-down factor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
from pathlib import Path

import nbformat
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kernel_lib.cadence import CrashTrace, evaluate_strides
import kernel_lib.cadence.napkin as napkin
from kernel_lib.gate.dispatch import (
    AdmissionPolicy,
    DispatchGate,
    ModelCall,
    ModelReply,
    ToolProposal,
    ToolReply,
    conclude,
)
from kernel_lib.errors import AdmissionDenied, StaleOwnerError
from kernel_lib.core.events import Compacted, ContextBuilt, TaskStarted, ToolResult
from kernel_lib.gate.inbox import ResultInbox
from kernel_lib.live.executor import signing_bytes
from kernel_lib.sim.model import MODEL_NAME, StochasticModel, repair_prompt
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.ownership.leases import ReplicaView, check_available
from kernel_lib.core.record import fold, initial_record
from kernel_lib.history.replay import rerun_match_probability, time_travel
from kernel_lib.resume.stages import PrefillModel

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "11_9_fallacies.ipynb"
DATA = ROOT.parent / "shared" / "data"

FAKE_KEY = "AKIA" + "EXAMPLEFAKE" + "00002"     # credential-shaped, not a real key
TRAJ = "traj_fallacy"
POLICY = AdmissionPolicy({"g": {"stand-in-model", "read_ci_logs", "run_tests"}})
TASK = TaskStarted(task_id="t", requester="alice", objective="fix the bug", grant_ids=["g"],
                   budget_ceiling_usd=5.0, finalization_reserve_usd=0.5)
SUMMARY = "Summary of the earlier turns: logs read, tests run."


def _record(leak: bool = True, refused_turn: int | None = None, *, turns: int = 6, leak_turn: int = 2,
            compaction_turn: int = 5):
    """Record a trajectory whose turn ``leak_turn`` tool output may hold a credential-shaped string and
    whose context is compacted from ``compaction_turn`` on. Returns (store, delivered inputs)."""
    store = MemoryStore()
    log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE)
    gate = DispatchGate(log, POLICY)
    gate.start(TASK)
    context, delivered = ["Task: fix the bug."], {}
    for turn in range(1, turns + 1):
        if turn == compaction_turn:
            ev = log.append(Compacted(summary=SUMMARY, covers_from_sequence=2, covers_to_sequence=store.head(TRAJ)))
            gate.record = fold(gate.record, [ev])
            context = [context[0], SUMMARY]
        inv = f"turn_{turn:02d}"
        delivered[inv] = "\n".join(context)
        gate.run_model(ModelCall(inv, "stand-in-model", delivered[inv], "g", 0.05),
                       lambda ctx: ModelReply(status="complete", reply="next", charged_usd=0.01))
        tool = "deploy" if turn == refused_turn else ("read_ci_logs" if turn == leak_turn else "run_tests")
        out = (f"export AWS_ACCESS_KEY_ID={FAKE_KEY}" if leak and turn == leak_turn else f"turn {turn} ok")
        try:
            gate.run_tool(ToolProposal(f"op_{turn}", "attempt1", tool, {"turn": turn}, "g", 0.1),
                          lambda intent, out=out: ToolReply(status="completed", outcome={"stdout": out},
                                                            observation_complete=True))
            context.append(f"{tool}: {gate.record.operations[f'op_{turn}'].outcome['stdout']}")
        except AdmissionDenied:
            context.append(f"{tool}: refused")
    return store, delivered


def _contexts(store):
    return [e for e in store.read(TRAJ) if e.event_type == "ContextBuilt"]


# --- fallacy 1: the final context window ------------------------------------------------------------


def test_the_log_keeps_the_evidence_of_a_credential_but_never_the_secret():
    """Fault: a tool returns a live-looking access key. Invariant: the log records that (and where)
    it arrived, redacted; no stored byte holds the key; a model input holding it cannot be logged."""
    store, _ = _record()
    result = next(e for e in store.read(TRAJ) if e.event_type == "ToolResult" and e.payload.operation_id == "op_2")
    assert result.payload.outcome["redacted_fields"] == ["stdout"]
    assert "[redacted]" in result.payload.outcome["stdout"]
    assert not any(FAKE_KEY.encode() in e.canonical for e in store.read(TRAJ))
    with pytest.raises(ValueError, match="credential"):
        ContextBuilt(invocation_id="x", model="m", delivered_input=FAKE_KEY,
                     delivered_input_sha256=hashlib.sha256(FAKE_KEY.encode()).hexdigest())


def test_final_context_loses_the_compacted_observation_while_time_travel_rebuilds_every_input():
    """Fault: compaction replaces an observation with a summary. Invariant: the final delivered
    input has no trace of it, while folding to each ContextBuilt returns exactly what was
    delivered there, including the inputs that carried it."""
    store, delivered = _record()
    ctxs = _contexts(store)
    assert "[redacted]" not in ctxs[-1].payload.delivered_input and SUMMARY in ctxs[-1].payload.delivered_input
    carried = []
    for e in ctxs:
        inv = e.payload.invocation_id
        rebuilt = time_travel(store, TRAJ, e.sequence_number).delivered_inputs[inv]
        assert rebuilt == delivered[inv]
        if "[redacted]" in rebuilt:
            carried.append(inv)
    assert carried == ["turn_03", "turn_04"]     # after the leak (turn 2), before the compaction (turn 5)


def test_one_final_context_fits_two_different_logs():
    """Invariant: the map from logs to final windows loses information. Two histories (one leaked
    a credential, the other had a proposal refused) end in byte-identical final inputs."""
    store_a, _ = _record(leak=True)
    store_b, _ = _record(leak=False, refused_turn=3)
    final_a, final_b = _contexts(store_a)[-1].payload, _contexts(store_b)[-1].payload
    assert final_a.delivered_input_sha256 == final_b.delivered_input_sha256
    rec_a, rec_b = fold(initial_record(TRAJ), store_a.read(TRAJ)), fold(initial_record(TRAJ), store_b.read(TRAJ))
    assert rec_a.prefix_sha256 != rec_b.prefix_sha256
    assert rec_b.operations["op_3"].status == "denied" and rec_a.operations["op_3"].status == "established"
    def leaks(store):
        return [e for e in store.read(TRAJ)
                if e.event_type == "ToolResult" and "redacted_fields" in (e.payload.outcome or {})]
    leaks_a, leaks_b = leaks(store_a), leaks(store_b)
    assert len(leaks_a) == 1 and not leaks_b


# --- pitfall 2: a checkpoint after every turn ---------------------------------------------------------


def test_checkpoint_after_every_turn_costs_what_the_napkin_prints():
    """On the reconstructed Napkin Math 11.1 trace, stride 1 gives the §11.9 figure and the printed
    winning stride its figure; the eq. 5 balance point is far cheaper than every turn."""
    nr = napkin.reconstruct()
    trace = CrashTrace(nr.turns, nr.crash_turns, "napkin")
    winner = napkin.PRINTED["winner_stride_turns"]
    ev = evaluate_strides(trace, [1, round(nr.logged_stride_turns), winner], pause_s=nr.pause_s,
                          restore_s_per_crash=nr.restore_s_per_crash,
                          reconstruction_s_per_turn=nr.reconstruction_s_per_turn)
    by_k = {r.stride_turns: r for r in ev.results}
    assert by_k[1].overhead_s == pytest.approx(napkin.PRINTED["every_turn_overhead_s"])
    assert by_k[winner].overhead_s == pytest.approx(napkin.PRINTED["winner_overhead_s"])
    assert by_k[1].capture_s / by_k[1].overhead_s > 0.9          # almost all of it is capture
    assert by_k[round(nr.logged_stride_turns)].overhead_s < by_k[1].overhead_s / 5


# --- fallacy 3: temperature zero ---------------------------------------------------------------------


def test_a_fresh_sample_differs_while_the_fold_returns_the_recorded_replies():
    """The stand-in is a pure function of (seed, prompt); a re-prompt under another seed answers
    differently, the logged replies come back unchanged from every fold."""
    prompt = repair_prompt("ws_r18")
    assert StochasticModel(0).reply(prompt) == StochasticModel(0).reply(prompt)
    assert StochasticModel(1).reply(prompt).reply != StochasticModel(0).reply(prompt).reply
    store = MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE),
                        AdmissionPolicy({"g": {MODEL_NAME}}))
    gate.start(TASK)
    history, replies = [prompt], []
    for t in range(1, 6):
        r = gate.run_model(ModelCall(f"c{t}", MODEL_NAME, "\n".join(history), "g", 0.5),
                           lambda ctx: StochasticModel(0).reply(ctx.delivered_input))
        history.append(r.reply)
        replies.append(r.reply)
    logged = [e.payload.reply for e in store.read(TRAJ) if e.event_type == "ModelReplied"]
    assert logged == replies
    digests = {fold(initial_record(TRAJ), store.read(TRAJ)).prefix_sha256 for _ in range(5)}
    assert len(digests) == 1


def test_reproduction_compounds_as_eq_1_1():
    """§11.9's example: 0.99 per call over 30 calls is about three in four (the notebook's cell uses
    kernel_lib.history.replay.rerun_match_probability, not an inline power)."""
    assert rerun_match_probability(0.99, 30) == pytest.approx(0.99 ** 30)
    assert rerun_match_probability(0.99, 30) == pytest.approx(0.74, abs=0.005)


def test_one_flipped_call_explains_every_later_difference():
    """Fault: the second of 30 stand-in calls returns another sample. Invariant (the breakdown the
    notebook explains): later calls get different inputs and replies, and every call from the
    flipped one on settles a different cost; nothing else differs."""
    from kernel_lib.history.diverge import locate_divergence

    def run(flipped):
        store = MemoryStore()
        gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE),
                            AdmissionPolicy({"g": {MODEL_NAME}}))
        gate.start(TASK)
        history = [repair_prompt("ws_r18")]
        for t in range(1, 31):
            r = gate.run_model(ModelCall(f"call_{t:02d}", MODEL_NAME, "\n".join(history), "g", 0.5),
                               lambda ctx, t=t: StochasticModel(1 if t == flipped else 0).reply(ctx.delivered_input))
            history.append(r.reply)
        return list(store.read(TRAJ))

    report = locate_divergence(run(None), run(2))
    assert report.first_mismatch.key == "ModelReplied call_02"
    groups: dict[tuple[str, str], list[str]] = {}
    for d in report.differences:
        event_type, call = d.key.split()
        groups.setdefault((d.category, event_type), []).append(call)
    assert {k: (len(v), v[0], v[-1]) for k, v in groups.items()} == {
        ("harness decision", "BudgetSettled"): (29, "call_02", "call_30"),
        ("assembled input", "ContextBuilt"): (28, "call_03", "call_30"),
        ("model response", "ModelReplied"): (28, "call_03", "call_30")}


@pytest.mark.skipif(not (DATA / "trajectories" / "tau-bench-airline").is_dir(), reason="no shared data")
def test_tau_bench_trials_of_one_task_diverge_within_the_first_model_calls():
    from kernel_lib.history.diverge import locate_divergence
    from kernel_lib.importers import import_file

    trials = sorted((DATA / "trajectories" / "tau-bench-airline").glob("task00_trial*.json"))
    assert len(trials) >= 2
    runs = [import_file("tau-bench", p).events for p in trials[:2]]
    report = locate_divergence(*runs)
    assert report.verdict == "diverged"
    first = [e for e in runs[0] if e.event_type == "ContextBuilt"][:3]
    assert report.first_mismatch.key in {f"ContextBuilt {e.payload.invocation_id}" for e in first} | {
        f"ModelReplied {e.payload.invocation_id}" for e in first}


# --- pitfall 4 and fallacy 5: replicas and epochs ------------------------------------------------------

REFUND = ToolProposal("refund_1142", "attempt1", "issue_refund", {"order": 1142, "amount_usd": 40}, "gr", 0.2,
                      repeat_contract="at_most_once")
REFUND_POLICY = AdmissionPolicy({"gr": {"issue_refund"}})
REFUND_TASK = TaskStarted(task_id="r", requester="s", objective="refund", grant_ids=["gr"], budget_ceiling_usd=5.0,
                          finalization_reserve_usd=0.5)


def _crashed_after_dispatch(proposal=REFUND):
    """The worker sends the request (the endpoint acts on it) and dies before any reply is logged."""
    store, paid = MemoryStore(), []
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE), REFUND_POLICY)
    gate.start(REFUND_TASK)

    def send_then_die(intent):
        paid.append(intent.attempt_id)
        raise SystemExit("killed")

    with contextlib.suppress(SystemExit):
        gate.run_tool(proposal, send_then_die)
    return store, paid


@pytest.mark.parametrize("lag", [0, 1, 2, 3])
def test_a_replica_is_never_certified_so_its_silence_never_proves_non_dispatch(lag):
    """Fault: recovery reads an asynchronous replica trailing by ``lag`` events after a crash that
    followed dispatch. Invariant: check_available refuses the replica at every lag (even 0), and the
    conclusion drawn under proven completeness is in doubt; only assuming completeness reproduces
    the pitfall."""
    store, paid = _crashed_after_dispatch()
    assert paid == ["attempt1"] and list(store.read(TRAJ))[-1].event_type == "ToolIntent"
    replica = ReplicaView(store, lag_events=lag)
    rec = fold(initial_record(TRAJ), replica.read(TRAJ))
    avail = check_available(replica, TRAJ)
    assert not avail.ok and "replica" in avail.reasons[0]
    assert conclude(rec, "refund_1142", prefix_complete=avail.ok)[0] == "in_doubt"
    assumed = conclude(rec, "refund_1142", prefix_complete=True)[0]
    assert assumed == ("in_doubt" if lag == 0 else "not_dispatched")
    primary = check_available(store, TRAJ)
    assert primary.ok
    assert conclude(fold(initial_record(TRAJ), store.read(TRAJ)), "refund_1142", primary.ok)[0] == "in_doubt"


def _signed_completion(key, op, attempt):
    pub = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    rec = {"executor_id": "payments", "trajectory_id": TRAJ, "operation_id": op, "attempt_id": attempt,
           "job_handle": f"pay_{op}", "status": "completed", "outcome": {"refunded_usd": 40}, "charged_usd": 0.05,
           "public_key_sha256": hashlib.sha256(bytes.fromhex(pub)).hexdigest()}
    rec["signature"] = key.sign(signing_bytes(rec)).hex()
    return rec, pub


def test_a_new_epoch_fences_appends_but_leaves_the_delivered_operation_in_doubt():
    """Fault: the owner dies after its request reached an at-most-once endpoint. Invariant: after
    a new owner_epoch the stale owner's append is refused, yet the operation stays in doubt with its
    reservation held and another attempt is refused, until the endpoint's signed completion is
    ingested; the endpoint acted exactly once throughout."""
    store, paid = _crashed_after_dispatch()
    epoch = store.claim_epoch(TRAJ)
    assert epoch == 1 and store.fence(TRAJ) == 1
    with pytest.raises(StaleOwnerError):
        TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=0).append(
            ToolResult(operation_id="refund_1142", attempt_id="attempt1", status="timeout"))
    rec = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec.in_doubt() == ["refund_1142"] and rec.budget.outstanding_reservations_usd == pytest.approx(0.2)
    new_log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=epoch)
    with pytest.raises(AdmissionDenied, match="at_most_once"):
        DispatchGate(new_log, REFUND_POLICY).run_tool(dataclasses.replace(REFUND, attempt_id="attempt2"),
                                                      lambda i: paid.append(i.attempt_id))
    assert paid == ["attempt1"]
    record, pub = _signed_completion(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), "refund_1142", "attempt1")
    with ResultInbox(":memory:", {"payments": pub}) as inbox:
        inbox.deposit(record, trajectory_id=TRAJ)
        report = inbox.ingest(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=epoch))
    assert [o.action for o in report.outcomes] == ["established"]
    after = fold(initial_record(TRAJ), store.read(TRAJ))
    assert after.operations["refund_1142"].status == "established"
    assert after.budget.outstanding_reservations_usd == pytest.approx(0.0)


def test_the_endpoint_contract_not_the_epoch_licenses_a_retry():
    """Same crash against an idempotency-key endpoint: a new attempt is admitted (the endpoint's
    de-duplication makes it safe); the epoch alone changed nothing about the operation."""
    store, paid = _crashed_after_dispatch(dataclasses.replace(REFUND, repeat_contract="idempotency_key"))
    epoch = store.claim_epoch(TRAJ)
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=epoch), REFUND_POLICY)
    assert gate.record.in_doubt() == ["refund_1142"]
    gate.run_tool(dataclasses.replace(REFUND, attempt_id="attempt2", repeat_contract="idempotency_key"),
                  lambda i: ToolReply(status="completed", outcome={"deduplicated": True}, observation_complete=True))
    assert gate.record.operations["refund_1142"].status == "established"


# --- pitfall 6: resuming anywhere ---------------------------------------------------------------------


def test_cold_prefill_of_the_chapter_context_and_a_warm_one():
    """The chapter's 2.3 s is a compute floor: the rate it implies is the fastest possible, so a
    slower real rate only lengthens both prefills. Waiting for the warm worker stays right at any
    slower rate; going cold at a 5 s queue holds only up to the computed factor."""
    rate = 32768 / 2.3
    cold = PrefillModel(32768, 0, rate)
    warm = PrefillModel(32768, 31744, rate)
    assert cold.prefill_s == pytest.approx(2.3)
    assert warm.prefill_tokens == 1024 and warm.prefill_s == pytest.approx(2.3 * 1024 / 32768)
    gap = cold.prefill_s - warm.prefill_s
    for slower in (1.0, 2.0, 2.2, 2.3, 4.0):
        c, w = PrefillModel(32768, 0, rate / slower), PrefillModel(32768, 31744, rate / slower)
        assert c.prefill_s >= cold.prefill_s
        assert 2.0 + w.prefill_s < c.prefill_s                       # a 2 s queue: wait, at any slower rate
        assert (5.0 + w.prefill_s < c.prefill_s) == (slower > 5.0 / gap)   # a 5 s queue flips past 5/gap
    assert 5.0 / gap == pytest.approx(2.244, abs=0.001)


# --- the notebook itself ---------------------------------------------------------------------------------


def test_notebook_follows_the_course_conventions():
    """Parameters cell with seed and shared_data; every section present; checked cells present;
    no machine path in a stored output; ends with what the record proves and cannot."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and "seed = " in params[0].source
    assert 'shared_data = "../../shared/data"' in params[0].source
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for heading in ("## 1. Fallacy", "## 2. Pitfall", "## 3. Fallacy", "## 4. Pitfall", "## 5. Fallacy",
                    "## 6. Pitfall",
                    "## What the surviving record proves, and what it cannot"):
        assert heading in text
    checked = [c for c in nb.cells if "nbval-check-output" in c.get("metadata", {}).get("tags", [])]
    assert len(checked) >= 6
    stored = json.dumps([c.get("outputs", []) for c in nb.cells if c.cell_type == "code"])
    for machine_path in ("/tmp/", "/work/", "/home/", str(ROOT)):
        assert machine_path not in stored
    assert not re.search(r"AKIA[0-9A-Z]{16}", NOTEBOOK.read_text())   # no credential-shaped string is stored
    # a replica check_available refuses yields no conclusion at all, not a conclusion labelled proven
    assert "cannot conclude (prefix not proven complete)" in stored and "proven conclusion" not in stored
    # wording the review corrected must not come back
    for retired in ("which no re-run\ndoes", "ideal* greedy decoder", "budget review", "no function for it",
                    "call 14.5", "possible consequence"):
        assert retired not in text and retired not in stored, retired
    assert "redact_secrets)" in stored                   # the refusal message is printed whole
