"""Runtime inputs and out-of-order serves in harness regression replay (§11.6.2; issue 14).

Fault model: (1) a changed harness draws its nondeterministic inputs differently: one more random
number (a retry jitter, say) before it makes an operation id, as in Temporal sdk-python #1109,
where a ``workflow.random()`` call added before ``workflow.uuid4()`` shifted a child workflow id
and replay failed later on the id, far from the cause. (2) Under ``order="any"`` a harness whose
identifiers shifted asks for identical requests under each other's ids, and each is served the
reply recorded for the id it now carries: another call's reply, by position.
Invariant: every identifier, random number and clock reading a harness draws through its
``HarnessRuntime`` is a recorded ``RuntimeInput`` and is served from the recording; the first draw
whose kind or name differs from the recording stops the replay *at that draw* with both sides
(draw index, the recorded kind, name and value, what the replay asked for). Under
``order="any"`` every serve that departs from the recorded order is in the replay report with
its recorded and served positions.
Goal: a faithful harness replays clean (same log, every draw served, no finding); a changed one is
reported where it changed.
"""

from __future__ import annotations

import random
from itertools import count

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib._support.clock import ManualClock
from kernel_lib.core.events import RuntimeInput, TaskStarted
from kernel_lib.errors import ConfigError, ReplayInputMismatchError, ReplayMismatchError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply
from kernel_lib.history.replay import RecordingRuntime, ReplayAdapter, replay_harness
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog

GRANT = "grant_probe"
POLICY = AdmissionPolicy({GRANT: {"run_tests", "stand-in-model"}})
TRAJ = "traj_inputs"


def _start(gate) -> None:
    gate.start(TaskStarted(task_id="probe", requester="alice", objective="probe the flaky test",
                           grant_ids=[GRANT], budget_ceiling_usd=5.0, finalization_reserve_usd=0.1))


class Services:
    """The live model and tool endpoints; they count what they received."""

    def __init__(self):
        self.tool_calls: list[str] = []
        self.model_calls: list[str] = []
        self._n = count(1)

    def model(self, ctx) -> ModelReply:
        self.model_calls.append(ctx.invocation_id)
        return ModelReply(status="complete", reply="probe it", input_tokens=10, output_tokens=2, charged_usd=0.001)

    def tool(self, intent) -> ToolReply:
        self.tool_calls.append(intent.operation_id)
        return ToolReply(status="completed", job_handle=f"job-{next(self._n)}",
                         outcome={"served_for": intent.operation_id}, observation_complete=True)


def record(harness, *, seed: int = 7, **kw):
    """Run ``harness`` live with a seeded RecordingRuntime; return (events, services)."""
    store, services = MemoryStore(), Services()
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE), POLICY)
    runtime = RecordingRuntime(gate, rng=random.Random(seed), clock=ManualClock(1_700_000_000.0))
    harness(gate, services.model, services.tool, [], runtime=runtime, **kw)
    return list(store.read(TRAJ)), services


def payloads(events):
    return [(e.event_type, e.payload.model_dump(mode="json")) for e in events]


# --- (1) a harness draws one more random number before it makes an operation id -----------------

def jitter_harness(gate, model, tool, inputs, *, runtime, extra_random: bool = False):
    """Asks the model, makes an operation id, then runs the test under it (the #1109 shape:
    the changed harness adds a random jitter draw before the id)."""
    _start(gate)
    gate.run_model(ModelCall("plan_1", "stand-in-model", "which test?", GRANT, 0.05), model)
    if extra_random:
        runtime.random("retry_jitter")
    op = runtime.new_id("test")
    gate.run_tool(ToolProposal(op, "attempt1", "run_tests", {"snapshot": "ws_r18", "op": op}, GRANT, 0.5), tool)
    runtime.now()


def test_the_unchanged_harness_replays_clean_and_reproduces_the_log():
    recorded, services = record(jitter_harness)
    draws = [e.payload for e in recorded if isinstance(e.payload, RuntimeInput)]
    assert [(d.kind, d.name) for d in draws] == [("identifier", "harness:id:test"), ("clock", "harness:now")]
    assert services.tool_calls == [draws[0].value]          # the id the service received is the recorded draw
    replayed, report = replay_harness(recorded, jitter_harness, policy=POLICY, with_runtime=True)
    assert payloads(replayed) == payloads(recorded)
    assert report.clean and report.complete and report.draws_served == 2 and report.findings == []
    assert services.tool_calls == [draws[0].value]          # replay reached no live service


def test_one_more_random_draw_before_the_id_is_reported_at_that_draw_with_both_sides():
    recorded, _ = record(jitter_harness)
    recorded_id = next(e.payload.operation_id for e in recorded if e.event_type == "ToolIntent")
    adapter = ReplayAdapter(recorded)
    gate = DispatchGate(TrajectoryLog(MemoryStore(), TRAJ, must_survive=FailureDomain.NONE), POLICY,
                        clock=adapter.clock)
    with pytest.raises(ReplayInputMismatchError) as err:
        jitter_harness(gate, adapter.model, adapter.tool, [], runtime=adapter.runtime(gate), extra_random=True)
    e = err.value
    assert isinstance(e, ReplayMismatchError) and e.draw_index == 1 and e.key == "draw #1"
    assert e.expected["kind"] == "identifier" and e.expected["name"] == "harness:id:test"
    assert e.expected["value"] == recorded_id                  # the recorded value, shown
    assert e.actual == {"kind": "random", "name": "harness:retry_jitter"}
    assert "harness:retry_jitter" in str(e) and recorded_id in str(e)
    # stopped at the draw, before any request carrying a shifted id was made
    assert adapter.report.served == ["model plan_1"]
    assert [f["finding"] for f in adapter.report.findings] == ["runtime_input_mismatch"]
    assert adapter.report.findings[0]["draw_index"] == 1


_DRAW = st.sampled_from(["random", "jitter", "id:test", "id:job", "uuid", "now"])


def draw_harness(gate, model, tool, inputs, *, runtime, plan):
    _start(gate)
    for d in plan:
        if d in ("random", "jitter"):
            runtime.random(d)
        elif d.startswith("id:"):
            runtime.new_id(d[3:])
        elif d == "uuid":
            runtime.uuid()
        else:
            runtime.now()


def _asked(d: str) -> tuple[str, str]:
    kind = "random" if d in ("random", "jitter") else "clock" if d == "now" else "identifier"
    return kind, "harness:" + d


@settings(max_examples=60, deadline=None)
@given(plan=st.lists(_DRAW, max_size=6), at=st.integers(0, 6), extra=_DRAW, seed=st.integers(0, 2**32))
def test_a_changed_draw_sequence_fails_at_the_first_draw_that_differs(plan, at, extra, seed):
    recorded, _ = record(draw_harness, seed=seed, plan=plan)
    values = [e.payload.value for e in recorded if isinstance(e.payload, RuntimeInput)
              and e.payload.name.startswith("harness:")]
    changed = plan[:at] + [extra] + plan[at:]
    first = next(i for i in range(len(changed)) if i >= len(plan) or changed[i] != plan[i])
    with pytest.raises(ReplayInputMismatchError) as err:
        replay_harness(recorded, draw_harness, policy=POLICY, with_runtime=True, plan=changed)
    e = err.value
    assert e.draw_index == first + 1
    assert (e.actual["kind"], e.actual["name"]) == _asked(changed[first])
    if first < len(plan):
        assert (e.expected["kind"], e.expected["name"]) == _asked(plan[first])
        assert e.expected["value"] == values[first]
    else:
        assert e.expected is None          # past the recording's last draw
    # and the unchanged plan replays clean, serving the recorded values
    replayed, report = replay_harness(recorded, draw_harness, policy=POLICY, with_runtime=True, plan=plan)
    assert report.clean and report.draws_served == len(plan) and payloads(replayed) == payloads(recorded)


def test_a_harness_that_draws_fewer_inputs_is_reported_incomplete():
    recorded, _ = record(draw_harness, plan=["random", "id:test", "now"])
    _, report = replay_harness(recorded, draw_harness, policy=POLICY, with_runtime=True, plan=["random"])
    assert not report.complete and not report.clean
    assert [u.split(" (")[0] for u in report.unserved_draws] == ["draw #2 identifier harness:id:test",
                                                                 "draw #3 clock harness:now"]


def test_bad_draw_arguments_are_config_errors():
    recorded, _ = record(draw_harness, plan=[])
    gate = DispatchGate(TrajectoryLog(MemoryStore(), "t2", must_survive=FailureDomain.NONE), POLICY)
    rt = RecordingRuntime(gate, rng=random.Random(1))
    for bad in (lambda: rt.new_id(""), lambda: rt.random(""), lambda: rt.randint(3, 1),
                lambda: RecordingRuntime(object())):
        with pytest.raises(ConfigError):
            bad()
    assert 1 <= rt.randint(1, 6) <= 6


# --- (2) a shifted id under order="any" ---------------------------------------------------------

def probe_harness(gate, model, tool, inputs, *, ids):
    """Three identical probes, issued concurrently in the harness's eyes; their ids come from a
    counter the changed harness shifts (``ids``)."""
    _start(gate)
    got = []
    for n in ids:
        gate.run_tool(ToolProposal(f"probe-{n}", "attempt1", "run_tests", {"snapshot": "ws_r18"}, GRANT, 0.5),
                      lambda intent: got.append(tool(intent)) or got[-1])
    return got


def _record_probes(n: int):
    store, services = MemoryStore(), Services()
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE), POLICY)
    probe_harness(gate, services.model, services.tool, [], ids=list(range(1, n + 1)))
    return list(store.read(TRAJ)), services


def test_a_shifted_id_under_any_order_is_reported_as_an_out_of_order_serve():
    recorded, services = _record_probes(3)
    assert services.tool_calls == ["probe-1", "probe-2", "probe-3"]
    _, report = replay_harness(recorded, probe_harness, order="any", policy=POLICY, ids=[2, 3, 1])
    assert report.complete and not report.clean                  # everything served, but not silently
    found = {f["request"]: f for f in report.findings if f["finding"] == "out_of_order_serve"}
    assert set(found) == {"tool probe-2/attempt1", "tool probe-3/attempt1", "tool probe-1/attempt1"}
    f = found["tool probe-2/attempt1"]
    assert (f["recorded_ordinal"], f["served_ordinal"]) == (2, 1)
    assert f["overtook"]["request"] == "tool probe-1/attempt1" and f["overtook"]["recorded_ordinal"] == 1
    assert found["tool probe-1/attempt1"]["served_after"]["request"] == "tool probe-3/attempt1"
    assert "served as #1" in f["message"]
    # the same order as recorded: no finding
    _, same = replay_harness(recorded, probe_harness, order="any", policy=POLICY, ids=[1, 2, 3])
    assert same.clean and same.findings == []


@settings(max_examples=60, deadline=None)
@given(perm=st.integers(2, 5).flatmap(lambda n: st.permutations(list(range(1, n + 1)))))
def test_any_order_reports_exactly_the_serves_that_leave_the_recorded_order(perm):
    recorded, _ = _record_probes(len(perm))
    _, report = replay_harness(recorded, probe_harness, order="any", policy=POLICY, ids=list(perm))
    out = {f["request"]: f for f in report.findings if f["finding"] == "out_of_order_serve"}
    expected = set()
    for j, r in enumerate(perm):
        before = perm[:j]
        early = any(x < r and x not in before for x in perm)
        late = any(x > r for x in before)
        if early or late:
            expected.add(f"tool probe-{r}/attempt1")
            f = out[f"tool probe-{r}/attempt1"]
            assert (f["recorded_ordinal"], f["served_ordinal"]) == (r, j + 1)
            assert ("overtook" in f) == early and ("served_after" in f) == late
    assert set(out) == expected
    assert (report.findings == []) == (list(perm) == sorted(perm))
    assert report.to_dict()["clean"] == (list(perm) == sorted(perm))


def test_recorded_order_still_refuses_the_shifted_id():
    recorded, _ = _record_probes(3)
    with pytest.raises(ReplayMismatchError, match="recorded order"):
        replay_harness(recorded, probe_harness, policy=POLICY, ids=[2, 3, 1])
