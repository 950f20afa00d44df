"""Table 14's sample on the live fleet (kernel_lib.live.scorecard_live): the simulated scorecard's
harness and fault plan over real processes, with drawn process kills made real SIGKILLs.

Fault model: the chapter's fault kinds per executed proposal (network drops before and after the
effect, wrong calls the services refuse, malformed calls), and process kills raised well above the
chapter's 4 % so that a small sample meets several: each a real SIGKILL of the worker at the drawn
position, the trajectory taken over by another worker. Invariant: for the synthesized
configuration no effect is applied twice and no resource leaks (the services' own counts), no
crash-consistency violation at any takeover or end, no committed turn lost (RPO 0), every kill it
met recovered with a measured RTO whose parts add up. Goal: the live scorecard reports the same
keys as the simulated one, so a reader compares the two.
"""

from __future__ import annotations

import pytest

from kernel_lib.errors import ConfigError
from kernel_lib.live.scorecard_live import run_live_scorecard
from kernel_lib.recovery.synthesis.faults import FaultProfile

KILLS = FaultProfile(network_drop=0.08, tool_exception=0.06, process_kill=0.25, format_corruption=0.02)


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    return run_live_scorecard(6, 1, 2, profile=KILLS, workdir=tmp_path_factory.mktemp("live-scorecard"))


def test_the_live_sample_has_the_simulated_scorecards_shape(doc):
    for key in ("wal_only", "synthesized", "configurations", "seed", "trajectories", "profile", "semantics",
                "time_labels", "live"):
        assert key in doc
    assert [r["name"] for r in doc["configurations"]] == ["wal_only", "synthesized"]
    for r in doc["configurations"]:
        for key in ("completion_rate", "completion_ci95", "duplicated_effects", "leaked_resources", "rpo_turns",
                    "rto_s", "mttr_s", "invariant_violations", "faults_injected", "states"):
            assert key in r, key
        assert sum(r["states"].values()) == 6
    assert doc["profile"]["process_kill"] == 0.25 and doc["services"].startswith("live")


def test_the_synthesized_runtime_keeps_its_guarantees_under_real_sigkills(doc):
    s = doc["synthesized"]
    assert s["kills"] >= 1 and s["self_kills"] == s["kills"] and s["takeovers"] >= s["kills"]
    assert s["duplicated_effects"] == 0 and s["leaked_resources"] == 0
    assert s["invariant_violations"] == 0 and s["invariant_checks"] >= 6 + s["takeovers"]
    assert s["rpo_turns"] == 0
    assert s["kills_recovered"] == s["kills"] and s["rto_s"] > 0
    parts = s["rto_parts_mean"]
    assert sum(parts.values()) == pytest.approx(s["rto_s"], abs=1e-3)
    assert s["rto_virtual_s"] + s["rto_cpu_s"] == pytest.approx(s["rto_s"], abs=1e-3)


def test_bad_arguments_are_refused_before_anything_starts():
    for kw in ({"trajectories": 0}, {"workers": 0}, {"turns": 5}, {"configs": []}, {"configs": ["nope"]}):
        with pytest.raises(ConfigError):
            run_live_scorecard(**{"trajectories": 1, **kw})


def test_scorecard_live_command_prints_the_same_json_keys(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "TMPDIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "kernel_lib", "scorecard", "--live", "--trajectories", "2", "--seed", "3",
                        "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert {"wal_only", "synthesized", "configurations", "seed", "trajectories"} <= set(d)
    assert d["seed"] == 3 and d["trajectories"] == 2 and d["synthesized"]["duplicated_effects"] == 0
    assert not [x for x in tmp_path.iterdir() if x.name.startswith("kl-fleet-")]
