"""The fast fold against the reducer it replaced (issue 15, "Read path"; §11.2.1).

Fault model: making the reducer faster (locals instead of record fields inside the loop, status
settled without walking the attempts, an inline money route, handlers that check in a new order)
changes what some log folds to, or which event is refused and with what message, or what a
record holds after a refusal. Invariant: on every event sequence, valid or not, the current
:func:`kernel_lib.core.record.fold_step` / :func:`fold` / :func:`fold_into` give the record (and
the refusal) that the frozen reference of :mod:`tests.fold_reference` gives, field for field and
in the same table order; folding a prefix and then the rest (directly, from a snapshot, or on a
fork) gives the record folded from the start; ``fold`` never changes its input.

Sequences: generated (hypothesis) from a small pool of ids so that the refusals happen (an id used
as both a tool and a model call, a repeated intent, a reservation reused or settled twice, an
approval resolved twice, amounts outside the schema, envelope faults), and real ones: the frozen
compatibility histories, the worksheet example log, gate-driven runs and the benchmarks' shape.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.core.events import (
    ActionMasked,
    ApprovalRequested,
    ApprovalResolved,
    AttemptWithheld,
    Authorized,
    BudgetReserved,
    BudgetSettled,
    Compacted,
    ContextBuilt,
    ControlChanged,
    Event,
    ModelReplied,
    Payload,
    PlanChanged,
    Provenance,
    QuarantineChanged,
    RuntimeInput,
    TaskStarted,
    ToolIntent,
    ToolResult,
    WorkspaceChanged,
)
from kernel_lib.core.record import TrajectoryRecord, fold, fold_into, fold_step, fork, initial_record
from kernel_lib.errors import FoldError
from kernel_lib.log import load_events
from kernel_lib.sim.events import EventMaker
from tests.fold_reference import reference_fold, reference_fold_into, reference_fold_step
from tests.test_record_fold import record_run

ROOT = Path(__file__).resolve().parent.parent
TRAJ = "traj-diff"

OPS = ["o1", "o2", "o3"]
ATTEMPTS = ["a1", "a2"]
RESERVATIONS = ["r1", "r2", "r3"]
APPROVALS = ["p1", "p2"]
DECISIONS = ["d1", "d2"]
TREES = [c * 64 for c in "012"]


class Unregistered(Payload):
    """A payload family this reducer version has no handler for (kept as a recovery record)."""

    event_type: ClassVar[str] = "UnregisteredForTest"
    schema_version: ClassVar[int] = 1
    note: str = ""


# --- generated payloads ------------------------------------------------------------------------

amounts = st.one_of(
    st.sampled_from([0.0, 0.01, 0.1, 0.25, 0.3974, 1.0, 5.0, 1e-7, 2.5e-7, 0.1234567, 1e9]),
    st.floats(min_value=0, max_value=20, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=5).map(float),
)
#: Amounts the schema refuses: only an event built around it (model_construct) carries one.
bad_amounts = st.sampled_from([-0.0, -1.0, -1e-9, math.nan, math.inf, -math.inf, 3, True, 1e30, "0.5"])


def _built(cls: type[Payload], **fields: Any) -> Payload:
    return cls.model_construct(**fields)


payloads = st.one_of(
    st.builds(lambda c, r: TaskStarted(task_id="t", requester="u", objective="x", budget_ceiling_usd=c,
                                       finalization_reserve_usd=min(c, r)), amounts, amounts),
    st.builds(lambda i, m: ContextBuilt(invocation_id=i, model=m, delivered_input=m,
                                        delivered_input_sha256=hashlib.sha256(m.encode()).hexdigest()),
              st.sampled_from(OPS), st.sampled_from(["m", "n"])),
    st.builds(lambda i, s, p: ModelReplied(invocation_id=i, status=s, reply="r", proposal=p, input_tokens=3,
                                           output_tokens=4),
              st.sampled_from(OPS), st.sampled_from(["complete", "partial", "error"]),
              st.sampled_from([None, {"k": 1}])),
    st.builds(lambda d, s, k, dec: Authorized(decision_id=d, subject_id=s, subject_kind=k, policy_version="p",
                                              grant_id="g", decision=dec),
              st.sampled_from(DECISIONS), st.sampled_from(OPS), st.sampled_from(["tool", "model"]),
              st.sampled_from(["allow", "deny"])),
    st.builds(lambda r, s, a: BudgetReserved(reservation_id=r, subject_id=s, amount_usd=a),
              st.sampled_from(RESERVATIONS), st.sampled_from(OPS), amounts),
    st.builds(lambda r, s, a, f: BudgetSettled(reservation_id=r, subject_id=s, actual_usd=a, final=f),
              st.sampled_from(RESERVATIONS), st.sampled_from(OPS), amounts, st.booleans()),
    st.builds(lambda o, a, t, arg, i, d, r: ToolIntent(operation_id=o, attempt_id=a, tool=t, arguments={"a": arg},
                                                       input_ref=i, repeat_contract="idempotent", grant_id="g",
                                                       authorization_ref=d, reservation_ref=r),
              st.sampled_from(OPS), st.sampled_from(ATTEMPTS), st.sampled_from(["t1", "t2"]), st.integers(0, 1),
              st.sampled_from([None, "in"]), st.sampled_from(DECISIONS), st.sampled_from(RESERVATIONS)),
    st.builds(lambda o, a, s, j, out, c, e: ToolResult(operation_id=o, attempt_id=a, status=s, job_handle=j,
                                                       outcome=out, observation_complete=c, evidence=e),
              st.sampled_from(OPS), st.sampled_from(ATTEMPTS),
              st.sampled_from(["accepted", "running", "completed", "failed", "timeout", "partial", "unreachable"]),
              st.sampled_from([None, "", "job"]), st.sampled_from([None, {}, {"n": 1}, {"status": "x"}]),
              st.booleans(), st.sampled_from([None, {"e": "x"}])),
    st.builds(lambda s, b: ControlChanged(request_id="c", issuer="op", to_state=s, bump_control_epoch=b),
              st.sampled_from(["RUNNING", "PAUSED", "AWAITING_APPROVAL", "FINALIZING", "COMPLETED", "CANCELLED",
                               "FAILED"]), st.booleans()),
    st.builds(lambda n: PlanChanged(plan_revision=n, steps=[{"s": n}]), st.integers(1, 3)),
    st.builds(lambda p, o, a, x: ApprovalRequested(approval_id=p, held_operation_id=o, held_attempt_id=a,
                                                   reviewer="rev", expires_unix_s=x),
              st.sampled_from(APPROVALS), st.sampled_from(OPS), st.sampled_from(ATTEMPTS),
              st.sampled_from([None, 1.0])),
    st.builds(lambda p, d: ApprovalResolved(approval_id=p, decision=d, reviewer="rev"),
              st.sampled_from(APPROVALS), st.sampled_from(["approved", "refused", "withdrawn", "expired"])),
    st.builds(lambda s, k, a, r: AttemptWithheld(subject_id=s, subject_kind=k, attempt_id=a, reservation_id=r),
              st.sampled_from(OPS), st.sampled_from(["tool", "model"]), st.sampled_from(ATTEMPTS + OPS),
              st.sampled_from([None] + RESERVATIONS)),
    st.builds(lambda v: RuntimeInput(kind="clock", name="now", value=v), st.integers(0, 9)),
    st.builds(lambda b, r: WorkspaceChanged(change_id="w", base_tree_sha256=b, result_tree_sha256=r,
                                            delta_sha256="d" * 64), st.sampled_from(TREES), st.sampled_from(TREES)),
    st.builds(lambda: Compacted(summary="s", covers_from_sequence=1, covers_to_sequence=2)),
    st.builds(lambda q: QuarantineChanged(subject_id="o1", subject_kind="tool", quarantined=q), st.booleans()),
    st.builds(lambda: Unregistered(note="n")),
    st.builds(lambda sig, t: ActionMasked(action_signature=sig, reason="loop", position=1, tool=t),
              st.sampled_from(["0" * 16, "f" * 16]), st.sampled_from([None, "t1"])),
    # amounts outside the schema (the reducer's own refusal, not the schema's)
    st.builds(lambda r, a: _built(BudgetReserved, reservation_id=r, subject_id="o1", amount_usd=a,
                                  policy_version="v1"), st.sampled_from(RESERVATIONS), bad_amounts),
    st.builds(lambda r, a: _built(BudgetSettled, reservation_id=r, subject_id="o1", actual_usd=a, final=True,
                                  evidence=""), st.sampled_from(RESERVATIONS), bad_amounts),
    st.builds(lambda a: _built(TaskStarted, task_id="t", requester="u", objective="x", grant_ids=[],
                               budget_ceiling_usd=a, finalization_reserve_usd=0.0, deadline_unix_s=None,
                               finalization_deadline_unix_s=None, initial_record_ref=None, workspace_ref=None,
                               config={}), bad_amounts),
)

@st.composite
def tool_turns(draw: Any) -> list[Payload]:
    """A tool turn on pooled ids: authorization, reservation, intent, perhaps a withholding and a
    new authorization, evidence, perhaps a settlement (so the paths a lone event rarely reaches,
    e.g. the authorization of a withheld operation, are reached)."""
    o, a, d, r = (draw(st.sampled_from(x)) for x in (OPS, ATTEMPTS, DECISIONS, RESERVATIONS))
    allow = st.sampled_from(["allow", "allow", "deny"])
    out: list[Payload] = [
        Authorized(decision_id=d, subject_id=o, subject_kind="tool", policy_version="p", grant_id="g",
                   decision=draw(allow)),
        BudgetReserved(reservation_id=r, subject_id=o, amount_usd=draw(amounts)),
        ToolIntent(operation_id=o, attempt_id=a, tool="t1", arguments={"a": draw(st.integers(0, 1))},
                   repeat_contract="idempotent", grant_id="g", authorization_ref=d, reservation_ref=r),
    ]
    if draw(st.booleans()):
        out.append(AttemptWithheld(subject_id=o, subject_kind="tool", attempt_id=a,
                                   reservation_id=draw(st.sampled_from([None, r]))))
        out.append(Authorized(decision_id=draw(st.sampled_from(DECISIONS)), subject_id=o, subject_kind="tool",
                              policy_version="p", grant_id="g", decision=draw(allow)))
    for status in draw(st.lists(st.sampled_from(["accepted", "running", "completed", "failed", "timeout"]),
                                max_size=2)):
        out.append(ToolResult(operation_id=o, attempt_id=a, status=status, outcome={"n": 1},
                              observation_complete=draw(st.booleans())))
    if draw(st.booleans()):
        out.append(BudgetSettled(reservation_id=r, subject_id=o, actual_usd=draw(amounts), final=draw(st.booleans())))
    return out


@st.composite
def model_turns(draw: Any) -> list[Payload]:
    """A model call: context, perhaps withheld, a reply (or none)."""
    i = draw(st.sampled_from(OPS))
    out: list[Payload] = [ContextBuilt(invocation_id=i, model="m", delivered_input="x",
                                       delivered_input_sha256=hashlib.sha256(b"x").hexdigest())]
    if draw(st.booleans()):
        out.append(AttemptWithheld(subject_id=i, subject_kind="model", attempt_id=i))
    if draw(st.booleans()):
        out.append(ModelReplied(invocation_id=i, status=draw(st.sampled_from(["complete", "partial", "error"]))))
    return out


@st.composite
def approval_turns(draw: Any) -> list[Payload]:
    """An approval requested while running, the trajectory resumed, the approval resolved."""
    p = draw(st.sampled_from(APPROVALS))
    return [ApprovalRequested(approval_id=p, held_operation_id=draw(st.sampled_from(OPS)),
                              held_attempt_id=draw(st.sampled_from(ATTEMPTS)), reviewer="rev"),
            ControlChanged(request_id="c", issuer="op", to_state="RUNNING"),
            ApprovalResolved(approval_id=p, decision=draw(st.sampled_from(["approved", "refused", "expired"])),
                             reviewer="rev")]


#: An envelope fault now and then: another trajectory, a sequence gap or repeat, a newer reducer.
envelope = st.tuples(st.sampled_from([None] * 30 + ["trajectory", "gap", "repeat", "reducer"]),
                     st.integers(0, 2), st.integers(0, 2))


@st.composite
def step_lists(draw: Any) -> list[tuple[Payload, str | None, int, int]]:
    """Events to fold: usually a task first, then lone events and coherent turns, each with its
    envelope (fault, owner epoch, control epoch)."""
    chunks = draw(st.lists(st.one_of(payloads.map(lambda p: [p]), tool_turns(), model_turns(), approval_turns()),
                           min_size=2, max_size=12))
    if draw(st.integers(0, 4)):
        chunks.insert(0, [TaskStarted(task_id="t", requester="u", objective="x", budget_ceiling_usd=10.0)])
    return [(p, *draw(envelope)) for chunk in chunks for p in chunk]


steps = step_lists()


def make_event(payload: Payload, seq: int, *, fault: str | None = None, owner_epoch: int = 0,
               control_epoch: int = 0) -> Event:
    """An event around ``payload`` built directly (no schema or canonical encoding: the reducer
    reads the envelope fields and ``digest`` only), with ``fault`` applied to its envelope."""
    traj = "traj-other" if fault == "trajectory" else TRAJ
    seq = seq + 1 if fault == "gap" else seq - 1 if fault == "repeat" else seq
    digest = hashlib.sha256(f"{seq}:{payload!r}".encode()).hexdigest()
    return Event(traj, f"e{seq}", seq, payload.event_type, payload.schema_version, 2 if fault == "reducer" else 1,
                 owner_epoch, control_epoch, Provenance("t", "i"), payload, b"", digest)


def outcome(step, rec: TrajectoryRecord, ev: Event) -> tuple[str, str] | None:
    try:
        step(rec, ev)
    except FoldError as exc:
        return (type(exc).__name__, str(exc))
    return None


def snapshot(rec: TrajectoryRecord) -> str:
    """The record's stored fields in table order (json keeps dict order), and its view."""
    return json.dumps([rec.state_dict(), rec.to_dict()], default=repr)


def content(rec: TrajectoryRecord) -> tuple[Any, ...]:
    """The record's stored fields and view compared as values (a row's field order aside: a record
    rebuilt from a snapshot lists a reservation's fields in another order), with each table's
    row order."""
    tables = (rec.operations, rec.budget.reservations, rec.approvals, rec.decisions)
    return (rec.state_dict(), rec.to_dict(), [list(t) for t in tables],
            [list(op.attempts) for op in rec.operations.values()])


# --- generated sequences -----------------------------------------------------------------------


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps)
def test_each_step_folds_and_refuses_as_the_reference_does(steps):
    """Step by step, continuing after refusals: same refusal (type and message) and same record
    after every event, including what a refused event left in the record."""
    ref, new = initial_record(TRAJ), initial_record(TRAJ)
    for payload, fault, owner_epoch, control_epoch in steps:
        ev = make_event(payload, ref.last_sequence_number + 1, fault=fault, owner_epoch=owner_epoch,
                        control_epoch=control_epoch)
        assert outcome(fold_step, new, ev) == outcome(reference_fold_step, ref, ev), ev
        assert snapshot(new) == snapshot(ref)
        assert new == ref


def _events_of(steps) -> list[Event]:
    """The steps' events, numbered as a fold that refuses nothing would number them."""
    return [make_event(p, i + 1, fault=fault, owner_epoch=o, control_epoch=c)
            for i, (p, fault, o, c) in enumerate(steps)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps)
def test_a_whole_fold_gives_the_reference_record_or_refusal(steps):
    """fold and fold_into over the whole sequence: the same record, or the same refusal with the
    same record left behind (fold_into keeps the events before the refused one)."""
    events = _events_of(steps)
    r0 = initial_record(TRAJ)
    before = snapshot(r0)
    try:
        want: Any = snapshot(reference_fold(r0, events))
    except FoldError as exc:
        want = str(exc)
    try:
        got: Any = snapshot(fold(r0, iter(events)))
    except FoldError as exc:
        got = str(exc)
    assert got == want
    assert snapshot(r0) == before   # fold never changes its input
    ref, new = initial_record(TRAJ), initial_record(TRAJ)
    for target, run in ((ref, reference_fold_into), (new, fold_into)):
        try:
            run(target, events)
        except FoldError:
            pass
    assert snapshot(new) == snapshot(ref)


def _valid_prefix(events: list[Event]) -> list[Event]:
    """The longest prefix the reducer folds without a refusal."""
    rec = initial_record(events[0].trajectory_id if events else TRAJ)
    for i, ev in enumerate(events):
        try:
            fold_step(rec, ev)
        except FoldError:
            return events[:i]
    return events


def assert_incremental_folds_agree(events: list[Event], k: int) -> None:
    """Folding ``events[:k]`` and then the rest, by every route a worker takes, gives the record
    folded from the start, and leaves the record it started from unchanged."""
    tid = events[0].trajectory_id if events else TRAJ
    whole = fold(initial_record(tid), events)
    want = content(whole)
    head, tail = events[:k], events[k:]
    mid = fold(initial_record(tid), head)
    mid_before = snapshot(mid)
    assert snapshot(fold(mid, tail)) == snapshot(whole)                             # checkpoint record + tail
    assert content(fold_into(TrajectoryRecord.from_dict(mid.state_dict()), tail)) == want
    assert content(fold_into(TrajectoryRecord.from_dict(mid.snapshot_state()), tail)) == want
    assert snapshot(fold_into(fork(mid, tail), tail)) == snapshot(whole)            # structural sharing
    stepped = initial_record(tid)
    for ev in events:
        fold_step(stepped, ev)
    assert snapshot(stepped) == snapshot(whole)
    assert snapshot(mid) == mid_before
    assert snapshot(reference_fold(initial_record(tid), events)) == snapshot(whole)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, data=st.data())
def test_folding_a_prefix_then_the_rest_equals_folding_from_the_start(steps, data):
    events = _valid_prefix(_events_of(steps))
    assert_incremental_folds_agree(events, data.draw(st.integers(0, len(events))))


# --- real sequences ----------------------------------------------------------------------------


HISTORY_LOGS = {f"history {p.parent.parent.name}/{p.parent.name}": p
                for p in sorted((ROOT / "tests" / "histories").glob("v*/*/events.jsonl"))}
BENCH_SEEDS = {f"bench shape, seed {seed}": seed for seed in (0, 1)}
REAL = sorted([*HISTORY_LOGS, "worksheet example", *BENCH_SEEDS])


@functools.cache
def real_log(name: str) -> list[Event]:
    """The events of a real log: a frozen history, the worksheet example, or 300 events of the
    benchmarks' shape (read or built when a test first asks for them)."""
    if name in HISTORY_LOGS:
        return load_events(HISTORY_LOGS[name], on_note=lambda _m: None)
    if name == "worksheet example":
        return load_events(ROOT / "datasets" / "worksheet_r18_example.jsonl", on_note=lambda _m: None)
    m = EventMaker(TRAJ, random.Random(BENCH_SEEDS[name]), short_texts=True)
    made = []
    for _ in range(300):
        made.append(m.make())
        m.next_seq += 1
    return made


@pytest.mark.parametrize("name", REAL)
def test_real_logs_fold_as_the_reference_folds_them(name):
    events = real_log(name)
    assert events, name
    tid = events[0].trajectory_id
    try:
        want: Any = snapshot(reference_fold(initial_record(tid), events))
    except FoldError as exc:
        want = str(exc)
    try:
        got: Any = snapshot(fold(initial_record(tid), events))
    except FoldError as exc:
        got = str(exc)
    assert got == want
    events = _valid_prefix(events)
    for k in sorted({0, 1, len(events) // 3, len(events) // 2, len(events) - 1, len(events)}):
        if 0 <= k <= len(events):
            assert_incremental_folds_agree(events, k)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("tool"), st.lists(st.sampled_from(["accepted", "running", "completed", "failed", "timeout",
                                                         "partial", "unreachable"]), max_size=3), st.booleans()),
    st.tuples(st.just("model"), st.sampled_from(["complete", "partial", "error"]), st.booleans()),
    st.tuples(st.just("pause"), st.just(None), st.booleans()),
), max_size=8), data=st.data())
def test_gate_driven_runs_fold_as_the_reference_folds_them(steps, data):
    """Logs the real dispatch gate writes (tests.test_record_fold.record_run)."""
    events, _ = record_run(steps)
    assert snapshot(fold(initial_record("traj-h"), events)) == snapshot(reference_fold(initial_record("traj-h"),
                                                                                        events))
    assert_incremental_folds_agree(events, data.draw(st.integers(0, len(events))))


def test_the_differential_test_can_fail():
    """A reducer that differs in one field is caught by the comparison the tests above make."""
    events = real_log("bench shape, seed 0")[:40]
    good = fold(initial_record(TRAJ), events)
    bad = fold(initial_record(TRAJ), events)
    first = next(iter(bad.operations.values()))
    first.status = "in_doubt" if first.status == "established" else "established"
    assert snapshot(bad) != snapshot(good)
    bad = fold(initial_record(TRAJ), events)
    bad.budget.reservations[next(iter(bad.budget.reservations))].settled_micro_usd += 1
    assert snapshot(bad) != snapshot(good)
