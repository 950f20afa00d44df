"""Simulated re-runs on a serving path that is not bit-stable (kernel_lib.sim.rerun, §11.9 "temperature zero").

Invariants: an unflipped call is the recorded computation and a flipped one always answers differently;
the log holds exactly the replies served; with every call reproducing, every re-run is identical, with
none reproducing, none is and each diverges at its first call; the simulation is a pure function of its
seed; its identical fraction tracks eq. 1.1; bad input is typed.
"""

from __future__ import annotations

import pytest

from kernel_lib.core.events import TaskStarted
from kernel_lib.errors import ConfigError
from kernel_lib.gate.dispatch import AdmissionPolicy
from kernel_lib.history.replay import rerun_match_probability
from kernel_lib.sim.model import MODEL_NAME, StochasticModel, repair_prompt
from kernel_lib.sim.rerun import FlippingServer, record_agent, simulate_reruns

POLICY = AdmissionPolicy({"g": {MODEL_NAME}})
TASK = TaskStarted(task_id="t", requester="alice", objective="fix", grant_ids=["g"], budget_ceiling_usd=100.0,
                   finalization_reserve_usd=0.5)
PROMPT = repair_prompt("ws_r18")


def test_a_flipped_call_always_answers_differently_and_an_unflipped_one_is_the_recording():
    server = FlippingServer(0)
    for p in (PROMPT, PROMPT + "\nmore"):
        assert server.serve(p, False) == StochasticModel(0).reply(p)
        assert server.serve(p, True).reply != server.serve(p, False).reply
        assert server.serve(p, True) == FlippingServer(0).serve(p, True)     # cached or not, the same


def test_the_log_holds_the_replies_served():
    store, replies = record_agent(FlippingServer(0), PROMPT, 6, POLICY, TASK, grant_id="g", flipped_calls={3})
    logged = [e.payload.reply for e in store.read("traj_rerun") if e.event_type == "ModelReplied"]
    assert logged == replies and len(replies) == 6
    _, recorded = record_agent(FlippingServer(0), PROMPT, 6, POLICY, TASK, grant_id="g")
    assert replies[:2] == recorded[:2] and replies[2] != recorded[2]


def test_the_extremes_and_the_seed():
    server = FlippingServer(0)
    _, recorded = record_agent(server, PROMPT, 8, POLICY, TASK, grant_id="g")
    every = simulate_reruns(server, recorded, PROMPT, per_call_reproduce=1.0, trials=20, seed=0)
    assert every.identical == 20 and every.first_flip == () and every.identical_fraction == 1.0
    never = simulate_reruns(server, recorded, PROMPT, per_call_reproduce=0.0, trials=20, seed=0)
    assert never.identical == 0 and set(never.first_flip) == {1}
    a = simulate_reruns(server, recorded, PROMPT, per_call_reproduce=0.9, trials=300, seed=5)
    assert a == simulate_reruns(FlippingServer(0), recorded, PROMPT, per_call_reproduce=0.9, trials=300, seed=5)
    assert a.identical_fraction == pytest.approx(rerun_match_probability(0.9, 8), abs=0.08)
    assert all(0 <= x <= 1 for x in a.later_changed) and len(a.first_flip) == 300 - a.identical


@pytest.mark.parametrize("kw", [{"per_call_reproduce": 1.5}, {"per_call_reproduce": True}, {"trials": 0},
                                {"seed": -1}, {"trials": 10 ** 7}])
def test_bad_input_is_typed(kw):
    args = {"per_call_reproduce": 0.9, "trials": 2, "seed": 0, **kw}
    with pytest.raises(ConfigError):
        simulate_reruns(FlippingServer(0), ["a"], PROMPT, **args)
    with pytest.raises(ConfigError):
        simulate_reruns(FlippingServer(0), [], PROMPT, per_call_reproduce=0.5, trials=1, seed=0)
