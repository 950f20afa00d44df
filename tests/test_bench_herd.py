"""``bench herd`` (kernel_lib.bench.herd): the shape of its result, its targets, its floor, and the
CLI. Only a smoke size here; speed targets are read from the benchmark's own output, never asserted
as timings."""

from __future__ import annotations

import json

import pytest

from kernel_lib.bench.herd import heapq_floor, run_herd_bench
from kernel_lib.cli import main
from kernel_lib.errors import ConfigError
from kernel_lib.sim.herd import POLICIES, HerdConfig, run_herd


def test_the_result_names_every_policy_the_floor_and_two_targets():
    r = run_herd_bench(agents=200, rounds=1)
    assert set(r["policies"]) == {p.name for p in POLICIES}
    for name, p in r["policies"].items():
        again = run_herd(HerdConfig(agents=200), next(x for x in POLICIES if x.name == name), 0)
        assert p["agent_steps"] == again.agent_steps and p["events"] == again.events
        assert p["per_event_over_floor"] > 0 and p["agent_steps_per_s"] > 0
    assert r["floor"]["events"] == r["policies"]["full_jitter"]["events"]
    assert [t["limit"] for t in r["targets"]] == ["<= 10", "<= 10"]
    assert all(isinstance(t["passed"], bool) for t in r["targets"])


def test_the_floor_makes_the_events_it_is_asked_for():
    assert heapq_floor(1000, 50) == 1000
    assert heapq_floor(10, 50) == 10


def test_bad_input_is_refused():
    with pytest.raises(ConfigError):
        run_herd_bench(agents=0)
    with pytest.raises(ConfigError):
        run_herd_bench(agents=10, rounds=0)


def test_cli_json(capsys):
    assert main(["bench", "herd", "--agents", "100", "--rounds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "herd" and out["targets"] and out["agents"] == 100
    assert main(["bench", "herd", "--agents", "0"]) == 2
