"""Table 14's scorecard on the twins: the simulation against the closed forms of the completion
rate at several trajectory lengths, the metrics' shape, and the services' counts behind them."""

from __future__ import annotations

import pytest
import sympy as sp

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.synthesis.completion import (
    SYMBOLS, completion_form, completion_rate, expected_duplicates, per_turn_form,
)
from kernel_lib.recovery.synthesis.faults import FaultProfile
from kernel_lib.sim.scorecard import completion_vs_turns, run_scorecard, wilson_ci95
from kernel_lib.sim.sysadmin import sysadmin_turns

Z999 = 3.2905267314919255   # a 99.9 % interval: eight comparisons, each must hold


def test_the_closed_forms_reduce_to_the_stated_semantics():
    d, e, k, f, a, r = (SYMBOLS[x] for x in "dekfar")
    assert sp.simplify(per_turn_form("unmanaged") - (1 - d - e - k - f)) == 0
    assert sp.simplify(per_turn_form("wal_only") - (1 - d - e - 2 * k / 3 - f)) == 0
    assert sp.simplify(per_turn_form("saga_only") - (1 - e - k - f)) == 0
    assert sp.simplify(per_turn_form("saga_only", "refused") - (1 - e - k - f - a * d)) == 0
    # without semantic or format faults the synthesized runtime gets every turn through
    assert sp.simplify(per_turn_form("synthesized").subs({e: 0, f: 0})) == 1
    # with repairs that always work, a turn fails only when the proposal and both repairs (K = 2)
    # each meet a tool exception
    assert sp.simplify(per_turn_form("synthesized").subs({r: 1, f: 0}) - (1 - e ** 3)) == 0
    assert completion_rate("unmanaged", 6) == pytest.approx(0.8 ** 6)
    assert float(completion_form("saga_only", ["repeats", "refused"]).subs(
        {d: 0.08, e: 0.06, k: 0.04, f: 0.02, a: 0.5})) == pytest.approx(0.88 * 0.84)
    with pytest.raises(ConfigError):
        completion_rate("synthesized", 0)


def test_spin_repairs_are_stopped_by_the_anti_spin_bound_after_one():
    spin = FaultProfile(repair_failure="spin")
    assert completion_rate("synthesized", 6, spin) < completion_rate("synthesized", 6)
    assert completion_rate("unmanaged", 6, spin) == completion_rate("unmanaged", 6)


@pytest.mark.parametrize("turns", [6, 12])
def test_the_simulated_completion_rate_follows_the_closed_form_as_trajectories_grow(turns):
    """The 'how completion moves with length' analysis: each configuration's simulated rate at 6
    and 12 turns lies in the 99.9 % Wilson interval around the closed form's prediction, and the
    rates fall with length except where the runtime absorbs nearly every fault."""
    rows = completion_vs_turns([turns], trajectories=150, seed=3)
    for row in rows:
        n = row["trajectories"]
        lo, hi = wilson_ci95(round(row["completion_rate"] * n), n, z=Z999)
        assert lo <= row["closed_form"] <= hi, row
    by = {r["config"]: r["completion_rate"] for r in rows}
    assert by["synthesized"] > by["saga_only"] > by["unmanaged"]


def test_the_scorecard_counts_effects_at_the_services_and_labels_its_time():
    doc = run_scorecard(trajectories=60, seed=1)
    names = ("unmanaged", "wal_only", "saga_only", "synthesized")
    assert [c["name"] for c in doc["configurations"]] == list(names)
    for n in names:
        row = doc[n]
        for key in ("completion_rate", "completion_ci95", "duplicated_effects", "leaked_resources", "rpo_turns",
                    "rpo_turns_mean", "rto_s", "mttr_s", "mtbf_s", "trajectories", "faults_injected",
                    "invariant_violations"):
            assert key in row, (n, key)
        lo, hi = row["completion_ci95"]
        assert lo <= row["completion_rate"] <= hi
        assert row is doc["configurations"][names.index(n)]
    syn, saga, unm, wal = doc["synthesized"], doc["saga_only"], doc["unmanaged"], doc["wal_only"]
    assert syn["duplicated_effects"] == 0 and syn["leaked_resources"] == 0 and syn["invariant_violations"] == 0
    assert syn["rpo_turns"] == 0 and syn["unsafe_pivots"] == 0
    assert unm["rpo_kind"] == saga["rpo_kind"] == "total_loss" and unm["rto_s"] is None and "rto_note" in unm
    assert unm["mttr_s"] is None and "mttr_note" in unm
    assert wal["invariant_violations"] == 0 and wal["leaked_resources"] > 0
    assert unm["invariant_violations"] > 0
    # the same seed, the same draws: every configuration met the same faults in its first proposals
    assert doc["profile"]["total"] == pytest.approx(0.2) and set(doc["semantics"]) == set(names)
    assert "virtual" in doc["time_labels"] and "measured" in doc["time_labels"]


def test_blind_retries_duplicate_about_as_often_as_the_form_expects():
    doc = run_scorecard(trajectories=300, seed=2, configs=["saga_only"], check_invariant=False)
    row = doc["saga_only"]
    n = row["trajectories"]
    expected = n * expected_duplicates("saga_only", [t.replay for t in sysadmin_turns("x", 6)])
    assert row["duplicated_effects"] == pytest.approx(expected, abs=4 * expected ** 0.5)
    assert row["duplicated_effects"] > 0 and row["duplicates_by_action"].get("apply_migration", 0) == 0


def test_the_scorecard_refuses_bad_input():
    with pytest.raises(ConfigError):
        run_scorecard(trajectories=0)
    with pytest.raises(ConfigError):
        run_scorecard(trajectories=1, turns=5)
    with pytest.raises(ConfigError):
        run_scorecard(trajectories=1, configs=["chaos"])


def test_the_wilson_interval_reaches_0_and_1_exactly_at_the_extremes():
    """Adversarial review: at 0 of n (or n of n) the interval's lower (upper) end came out as
    1e-18 (0.9999999999999999), so a closed form of exactly 0 (1) was reported outside it."""
    for n in (1, 7, 20, 400, 1000, 4321):
        assert wilson_ci95(0, n)[0] == 0.0 and wilson_ci95(n, n)[1] == 1.0
    everything_drops = FaultProfile(network_drop=1.0, tool_exception=0.0, process_kill=0.0, format_corruption=0.0)
    doc = run_scorecard(trajectories=7, seed=0, configs=["unmanaged", "synthesized"], profile=everything_drops)
    assert doc["unmanaged"]["completion_rate"] == 0.0 and doc["unmanaged"]["completion_closed_form"] == 0.0
    assert doc["synthesized"]["completion_rate"] == 1.0 and doc["synthesized"]["completion_closed_form"] == 1.0
    assert doc["unmanaged"]["closed_form_within_ci95"] and doc["synthesized"]["closed_form_within_ci95"]
