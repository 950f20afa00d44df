"""The lifeline stepper widget (widgets/lifeline_stepper.py) over figure 5's ladder.

Fault model: a ladder computed from a deployment saga whose reply was lost after the effect and
whose worker crashed during the unwind; moves past either end, values that are not whole numbers,
turns the ladder does not have, malformed commands, from code and through the command trait.
Invariant: the widget shows the kernel's messages unchanged (no message of its own making), the
current message is always one the kernel computed, and a refused move keeps the last good one
with the widget's own message. Goal: a student steps, scrubs and jumps through the ladder without
a traceback.
"""

from __future__ import annotations

import pytest

from kernel_lib.errors import ConfigError
from kernel_lib.log import MemoryStore
from kernel_lib.recovery.synthesis.lifelines import KIND_MEANINGS, Crash, lifeline_messages
from kernel_lib.sim.saga_demo import SagaDemo
from kernel_lib.sim.services import TwinFleet
from widgets.lifeline_stepper import LifelineStepper


def click(w: LifelineStepper, action: str, **fields) -> None:
    w.command = {"action": action, **fields, "n": w.completed + 1}


@pytest.fixture(scope="module")
def ladder():
    fleet = TwinFleet()
    demo = SagaDemo(fleet, saga_id="ll", sleep=fleet.clock.advance)
    demo.inject("timeout_after", 2)
    for _ in range(5):
        demo.step()
    crashed = demo.crash_during_unwind(2)
    demo.recover()
    demo.unwind()
    msgs = lifeline_messages(demo.events(), fleet.audits(), crashes=[Crash(crashed["log_head"], "SIGKILL")])
    demo.close()
    return msgs


def test_the_widget_shows_the_kernels_ladder_unchanged(ladder):
    w = LifelineStepper(ladder, title="the deployment saga")
    assert w.messages == [m.to_json() for m in ladder]
    assert [lf["id"] for lf in w.lifelines] == ["scheduler", "log", "saga", "services"]
    assert {r["kind"] for r in w.legend} == {m.kind for m in ladder}
    assert all(r["meaning"] == KIND_MEANINGS[r["kind"]] for r in w.legend)
    assert w.step == 1 and w.current["label"] == ladder[0].label and w.error == ""
    assert w.readout.startswith(f"message 1 of {len(ladder)} · turn 0")
    assert [t["turn"] for t in w.turns] == [0, 1, 2, 3, 4, 5]


def test_stepping_scrubbing_and_jumping(ladder):
    w = LifelineStepper(ladder)
    click(w, "next")
    assert w.step == 2 and w.current["index"] == 1 and w.error == ""
    click(w, "last")
    assert w.step == len(ladder) and w.current["label"] == ladder[-1].label
    click(w, "prev")
    assert w.step == len(ladder) - 1
    click(w, "goto", to=str(len(ladder)))            # the slider sends numbers; a digit string is one too
    assert w.step == len(ladder) and w.error == ""
    crash = next(m for m in ladder if m.kind == "crash")
    click(w, "turn", turn=crash.turn)
    first = next(m for m in ladder if m.turn == crash.turn)
    assert w.step == first.index + 1 and w.current["turn"] == crash.turn
    click(w, "goto", to=crash.index + 1)
    assert w.current["kind"] == "crash" and w.current["position"] == crash.position
    assert w.current["meaning"] == KIND_MEANINGS["crash"] and w.readout.endswith("· crash")
    click(w, "next")
    assert w.current["kind"] == "recover" and "Σ = [C1, C2, C3]" in w.current["label"]
    probe = next(m for m in ladder if m.kind == "probe" and m.operation_id == "ll.T2")
    click(w, "goto", to=probe.index + 1)
    assert "status lookup of T2" in w.current["label"]


def test_out_of_range_and_wrong_values_are_refused_and_keep_the_last_good_step(ladder):
    w = LifelineStepper(ladder)
    click(w, "prev")
    assert "no message before the first" in w.error and w.step == 1
    click(w, "next")
    assert w.error == "" and w.step == 2
    click(w, "goto", to=len(ladder) + 5)
    assert f"the ladder has {len(ladder)} messages" in w.error and w.step == 2
    assert w.current["index"] == 1                           # still showing message 2
    w.step = "three"
    assert "a step is a whole number" in w.error and w.step == 2
    w.step = 0
    assert "step = 0 was refused" in w.error and w.step == 2
    w.step = 7.0
    assert w.error == "" and w.step == 7 and w.current["index"] == 6
    click(w, "turn", turn=42)
    assert "turn 42 is not in this ladder" in w.error and w.step == 7
    click(w, "last")
    click(w, "next")
    assert "messages" in w.error and w.step == len(ladder)
    click(w, "fly")
    assert "unknown action 'fly'" in w.error
    w.command = "junk"
    assert "malformed command" in w.error
    click(w, "first")
    assert w.error == "" and w.step == 1
    w.step = None                                              # None is refused too, not ignored
    assert "was refused" in w.error and w.step == 1


def test_the_stepper_refuses_what_is_not_a_ladder(ladder):
    with pytest.raises(ConfigError, match="nothing to step through"):
        LifelineStepper([])
    with pytest.raises(ConfigError, match="lifeline messages"):
        LifelineStepper([object()])
    for not_a_list in (None, 5, "turn 3", {"kind": "crash"}):
        with pytest.raises(ConfigError, match="lifeline messages"):
            LifelineStepper(not_a_list)
    w = LifelineStepper(ladder, step=999)                     # a bad first step: refused, the first shown
    assert w.step == 1 and "was refused" in w.error


def test_from_log_and_json_round_trip(ladder):
    fleet = TwinFleet()
    store = MemoryStore()
    demo = SagaDemo(fleet, saga_id="rt")
    demo.step()
    w = LifelineStepper.from_log(demo.events(), fleet.audits(), title="one step")
    assert [m["kind"] for m in w.messages] == ["start", "start", "propose", "intent", "dispatch", "effect", "reply",
                                               "commit"]
    again = LifelineStepper([m.to_json() for m in ladder])
    assert again.messages == [m.to_json() for m in ladder]
    demo.close()
    store.close()
