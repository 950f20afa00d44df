"""Failure Recovery, Example 0.2 (exercise ex0.2, containment latency and blast radius budget):
the solver against the chapter's printed figures and against the timeline added up here from
the givens, the sequential-waves reading, the CLI, and the measured variant on this machine.

The generic checks every registered exercise passes (seeds, wrong answers, notebooks under
papermill) are in test_exercises.py.
"""

from __future__ import annotations

import json
import os

import pytest

from kernel_lib.cli import main
from kernel_lib.course.exercises import accept_readings, canonical_id, ex0_2, get
from kernel_lib.errors import ConfigError

D = ex0_2.DEFAULTS


def by_hand(p: dict, sequential: bool = False) -> dict:
    sealed = p["policy_check_ms"] + p["egress_drop_ms"]
    frozen = p["policy_check_ms"] + p["freeze_ms"]
    local = max(sealed, frozen)
    start2 = local if sequential else p["policy_check_ms"]
    token = 1000.0 / p["decode_tokens_per_s"]
    return {"egress_sealed_ms": sealed, "frozen_ms": frozen, "local_seal_ms": local,
            "taint_ms": start2 + p["taint_broadcast_ms"], "revoked_ms": start2 + p["idp_revocation_ms"],
            "token_ms": token, "sealed_within_one_token": local < token}


def test_the_id_and_the_parameter_names_are_the_issues():
    for form in ("ex0.2", "EX0.2", "ex0_2"):
        assert get(form) is ex0_2 and canonical_id(form) == "ex0.2"
    assert D == {"policy_check_ms": 1.1, "egress_drop_ms": 0.4, "freeze_ms": 1.2, "idp_revocation_ms": 42.0,
                 "taint_broadcast_ms": 3.5, "decode_tokens_per_s": 50.0}
    assert [p.name for p in ex0_2.PARAMS] == list(D)


def test_the_defaults_give_the_chapters_printed_timeline():
    s = ex0_2.solve()
    assert (s["egress_sealed_ms"], s["frozen_ms"], s["taint_ms"], s["revoked_ms"]) == (1.5, 2.3, 4.6, 43.1)
    assert s["local_seal_ms"] == 2.3 and s["token_ms"] == 20.0 and s["sealed_within_one_token"]
    assert s["tokens_before_seal"] == 0
    rows = ex0_2.chapter_figures()
    assert all(r["holds"] for r in rows), [r for r in rows if not r["holds"]]


@pytest.mark.parametrize("seed", range(30))
def test_the_solver_matches_the_timeline_added_up_by_hand(seed):
    p = ex0_2.validate_params(ex0_2.generate(seed))
    s, hand = ex0_2.solve(p), by_hand(p)
    for k, v in hand.items():
        assert s[k] == pytest.approx(v), k
    seq = by_hand(p, sequential=True)
    alt = s["alternative"]["sequential_waves"]
    assert alt["taint_ms"] == pytest.approx(seq["taint_ms"]) and alt["revoked_ms"] == pytest.approx(seq["revoked_ms"])
    assert ex0_2.check(p, {k: s[k] for k in ex0_2.GRADED})["all_ok"]


def test_a_slow_freeze_loses_the_race_against_one_token():
    s = ex0_2.solve({"freeze_ms": 30.0})
    assert not s["sealed_within_one_token"] and s["tokens_before_seal"] == 1 and s["decision"] == "seal_too_slow"


def test_the_sequential_reading_is_graded_alternative():
    s = ex0_2.solve()
    answers = {**{k: s[k] for k in ex0_2.GRADED}, **s["alternative"]["sequential_waves"]}
    report = ex0_2.check(None, answers)
    assert report["quantities"]["taint_ms"]["status"] == "alternative" and not report["all_ok"]
    assert accept_readings(report)["all_ok"]


@pytest.mark.parametrize("bad", [{"freeze_ms": -1.0}, {"decode_tokens_per_s": 0.0}, {"policy_check_ms": "fast"},
                                 {"latency_ms": 1.0}])
def test_bad_givens_are_config_errors(bad):
    with pytest.raises(ConfigError):
        ex0_2.solve(bad)


def test_the_cli_solves_it(capsys):
    assert main(["exercise", "solve", "ex0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["revoked_ms"] == 43.1 and out["local_seal_ms"] == 2.3 and out["sealed_within_one_token"] is True


@pytest.mark.skipif(os.geteuid() != 0, reason="the measured variant runs the real quarantine (needs root)")
def test_the_measured_variant_feeds_this_machines_figures_into_the_formula(tmp_path):
    from kernel_lib.course.exercises import ex0_2_measure

    m = ex0_2_measure.measure_containment(directory=tmp_path)
    g = m["measured_givens"]
    assert g["decode_tokens_per_s"] == D["decode_tokens_per_s"] and g != D
    assert m["napkin_measured"]["egress_sealed_ms"] == pytest.approx(g["policy_check_ms"] + g["egress_drop_ms"])
    assert all(m["checks"].values()), m["checks"]
    rows = ex0_2_measure.comparison_rows(m)
    assert [r["event"] for r in rows][:2] == ["egress sealed", "tree frozen"]
    assert all(r["observed_ms"] is not None and r["observed_ms"] > 0 for r in rows)
