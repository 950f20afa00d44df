"""Failure Recovery, Napkin Math 0.5 (exercise nm0.5, recovery overhead and RTO bounds): the closed
forms against a plain-arithmetic recomputation of the same givens (and the KV cache against the size
of an actual array of that shape), the chapter's printed figures, the named readings, bad givens and
the CLI.

The generic checks every registered exercise passes (seeds, wrong answers, notebooks under
papermill) are in test_exercises.py and test_exercise_grade.py. Expected values are computed here by
other means (float arithmetic, numpy array sizes), or are the chapter's printed text.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernel_lib.cli import main
from kernel_lib.course.exercises import accept_readings, canonical_id, format_report, get
from kernel_lib.course.exercises import nm0_5
from kernel_lib.errors import ConfigError
from kernel_lib.recovery.synthesis import rto

D = nm0_5.DEFAULTS


def graded(params=None) -> dict:
    sol = nm0_5.solve(params)
    return {k: sol[k] for k in nm0_5.GRADED}


def plain(p: dict, layers=80, kv_heads=8, head_dim=128, value_bytes=2) -> dict:
    """The block's arithmetic with floats, step by step, no sympy."""
    snap = p["snapshot_mb"] / p["disk_mb_per_s"] * 1000.0
    wal = (p["wal_kb"] / 1000.0) / p["disk_mb_per_s"] * 1000.0 + p["random_read_us"] / 1000.0
    delta = p["context_tokens"] - p["snapshot_tokens"]
    prefill = delta / p["prefill_tokens_per_s"] * 1000.0
    full = p["context_tokens"] / p["prefill_tokens_per_s"] * 1000.0
    per_token = np.zeros((2, layers, kv_heads, head_dim), dtype=np.float16).nbytes   # K and V of one token
    kv_mb = per_token * p["snapshot_tokens"] / 1e6
    kv_snap = (p["snapshot_mb"] + kv_mb) / p["disk_mb_per_s"] * 1000.0
    return {"t_snap_ms": snap, "t_wal_ms": wal, "delta_tokens": delta, "t_prefill_ms": prefill,
            "t_probe_ms": p["probe_ms"], "rto_ms": snap + wal + prefill + p["probe_ms"], "full_prefill_ms": full,
            "full_prefill_extra_ms": full - prefill, "kv_bytes_per_token": per_token, "kv_cache_mb": kv_mb,
            "snapshot_kv_token_capacity": int(p["snapshot_mb"] * 1e6 // per_token),
            "snapshot_holds_kv_cache": p["snapshot_mb"] >= kv_mb,
            "tokens_only_rto_ms": snap + wal + full + p["probe_ms"],
            "kv_snapshot_rto_ms": kv_snap + wal + prefill + p["probe_ms"]}


def assert_same(sol: dict, ref: dict) -> None:
    for k, v in ref.items():
        if isinstance(v, (bool, int)) and not isinstance(v, float):
            assert sol[k] == v, (k, sol[k], v)
        else:
            assert sol[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (k, sol[k], v)


def test_every_form_of_the_id_names_napkin_math_0_5():
    for form in ("nm0.5", "NM0.5", "nm0_5", " Nm0_5 "):
        assert get(form) is nm0_5 and canonical_id(form) == "nm0.5"


def test_the_parameter_names_and_defaults_are_the_issues():
    assert D == {"context_tokens": 16384, "snapshot_tokens": 12288, "snapshot_mb": 48.0, "wal_kb": 128.0,
                 "disk_mb_per_s": 3500.0, "random_read_us": 25.0, "prefill_tokens_per_s": 8000.0, "probe_ms": 45.0}
    assert [p.name for p in nm0_5.PARAMS] == list(D)
    assert rto.CHAPTER_GIVENS == D and tuple(D) == rto.GIVEN_NAMES   # the measured decomposition uses the same


def test_the_defaults_give_the_printed_sum_and_not_the_printed_addition():
    s = nm0_5.solve()
    assert_same(s, plain(D))
    # the printed figures the block's formulas give
    assert round(s["t_snap_ms"], 1) == 13.7 and round(s["t_wal_ms"], 2) == 0.06 and s["delta_tokens"] == 4096
    assert s["t_prefill_ms"] == 512 and s["t_probe_ms"] == 45 and round(s["rto_ms"], 1) == 570.8
    # "an additional 2.05 s": 2.048 s is the whole prefill; what it adds over the delta is 1.536 s
    assert s["full_prefill_ms"] == 2048 and s["full_prefill_extra_ms"] == 1536
    # 48 MB against the KV cache of 12,288 tokens of a 70B model with 8 KV heads
    assert s["kv_bytes_per_token"] == 327_680 and s["kv_cache_mb"] == pytest.approx(4026.53184)
    assert s["snapshot_holds_kv_cache"] is False and s["snapshot_kv_token_capacity"] == 146
    assert s["tokens_only_rto_ms"] == pytest.approx(2106.7758571428)
    assert s["decision"] == "within_threshold"
    rows = {r["claim"]: r for r in nm0_5.chapter_figures()}
    assert {c for c, r in rows.items() if not r["holds"]} == {"additional prefill from scratch",
                                                              "the snapshot preserves the inference state"}
    assert rows["additional prefill from scratch"]["computed"] == "1.536 s"
    assert "2.048 s is the whole prefill" in rows["additional prefill from scratch"]["note"]


def test_the_readings_set_the_three_sums_side_by_side():
    rows = {r["reading"]: r for r in rto.rto_readings(D)}
    assert list(rows) == ["chapter", "tokens_only", "kv_cache_snapshot"]
    ref = plain(D)
    assert rows["chapter"]["rto_ms"] == pytest.approx(ref["rto_ms"])
    assert rows["tokens_only"]["prefill_tokens"] == 16384 and rows["tokens_only"]["rto_ms"] == pytest.approx(
        ref["tokens_only_rto_ms"])
    assert rows["kv_cache_snapshot"]["t_snap_ms"] == pytest.approx((48 + 4026.53184) / 3500 * 1000)
    for r in rows.values():
        parts = r["t_snap_ms"] + r["t_wal_ms"] + r["t_prefill_ms"] + r["t_probe_ms"]
        assert r["rto_ms"] == pytest.approx(parts) and r["within_threshold"] == (r["rto_ms"] < 5000)
    assert "does not fit" in rows["chapter"]["note"]


@pytest.mark.parametrize("seed", range(30))
def test_seeded_variants_match_plain_arithmetic(seed):
    p = nm0_5.validate_params(nm0_5.generate(seed))
    assert_same(nm0_5.solve(p), plain(p))


def test_a_big_enough_snapshot_holds_the_kv_cache():
    s = nm0_5.solve({"snapshot_mb": 4100.0})
    assert s["snapshot_holds_kv_cache"] is True and s["snapshot_kv_token_capacity"] == 12_512
    assert not nm0_5.solve({"snapshot_mb": 4026.0})["snapshot_holds_kv_cache"]
    assert nm0_5.solve({"snapshot_tokens": 0})["snapshot_holds_kv_cache"] is True   # nothing to hold


def test_a_variant_over_the_threshold_says_so():
    s = nm0_5.solve({"context_tokens": 131072, "snapshot_tokens": 114688, "prefill_tokens_per_s": 8000.0})
    assert s["rto_ms"] < 5000 < s["tokens_only_rto_ms"]
    assert s["decision"] == "within_threshold_only_if_the_kv_cache_is_restored"
    assert nm0_5.solve({"probe_ms": 6000.0})["decision"] == "over_threshold"


@settings(max_examples=80, deadline=None)
@given(L=st.integers(1, 200_000), share=st.floats(0, 1), snap=st.floats(0, 1e5), wal=st.floats(0, 1e6),
       disk=st.floats(1, 2e4), rand=st.floats(0, 1e3), P=st.floats(100, 1e5), probe=st.floats(0, 1e3))
def test_the_sum_and_its_orderings_hold_for_any_givens(L, share, snap, wal, disk, rand, P, probe):
    p = {"context_tokens": L, "snapshot_tokens": int(L * share), "snapshot_mb": snap, "wal_kb": wal,
         "disk_mb_per_s": disk, "random_read_us": rand, "prefill_tokens_per_s": P, "probe_ms": probe}
    t = rto.rto_terms(p)
    assert t["rto_ms"] == pytest.approx(t["t_snap_ms"] + t["t_wal_ms"] + t["t_prefill_ms"] + t["t_probe_ms"])
    assert t["full_prefill_extra_ms"] == pytest.approx(t["full_prefill_ms"] - t["t_prefill_ms"], abs=1e-9)
    assert t["tokens_only_rto_ms"] >= t["rto_ms"] - 1e-9 and t["kv_snapshot_rto_ms"] >= t["rto_ms"] - 1e-9
    assert t["snapshot_holds_kv_cache"] == (t["snapshot_kv_token_capacity"] >= p["snapshot_tokens"])
    slower = rto.rto_terms({**p, "disk_mb_per_s": disk / 2})
    assert slower["rto_ms"] >= t["rto_ms"] - 1e-9


# --- the named readings ------------------------------------------------------------------------------


def test_the_alternative_readings_are_computed_from_their_own_assumptions():
    alt = nm0_5.solve()["alternative"]
    assert alt["additional_is_full_prefill"] == {"full_prefill_extra_ms": 2048.0}
    blocks = alt["random_read_per_4k_block"]
    assert blocks["t_wal_ms"] == pytest.approx(0.128 / 3500 * 1000 + 32 * 0.025)
    assert alt["binary_units"]["kv_cache_mb"] == pytest.approx(327_680 * 12_288 / 2 ** 20) == 3840
    mha = alt["full_multi_head_attention"]
    assert mha["kv_bytes_per_token"] == np.zeros((2, 80, 64, 128), dtype=np.float16).nbytes
    assert alt["snapshot_holds_tokens_only"]["rto_ms"] == pytest.approx(plain(D)["tokens_only_rto_ms"])


@pytest.mark.parametrize("reading, params, names", [
    ("additional_is_full_prefill", None, ("full_prefill_extra_ms",)),
    ("random_read_per_4k_block", None, ("t_wal_ms",)),
    ("binary_units", None, ("kv_cache_mb", "kv_snapshot_rto_ms")),
    ("full_multi_head_attention", None, ("kv_bytes_per_token", "kv_cache_mb", "snapshot_kv_token_capacity",
                                         "kv_snapshot_rto_ms")),
    ("snapshot_holds_tokens_only", None, ("rto_ms",)),
])
def test_an_answer_of_a_named_reading_is_graded_alternative_and_accepted_on_request(reading, params, names):
    alt = nm0_5.solve(params)["alternative"][reading]
    report = nm0_5.check(params, {**graded(params), **{n: alt[n] for n in names}})
    for n in names:
        q = report["quantities"][n]
        assert q["status"] == "alternative" and q["reading"] == reading and not q["ok"], (n, q)
    assert not report["all_ok"] and report["score"] == len(nm0_5.GRADED) - len(names)
    assert f"matches the reading '{reading}'" in format_report(report)
    assert accept_readings(report)["all_ok"]


def test_right_answers_pass_and_wrong_ones_fail():
    assert nm0_5.check(None, graded())["all_ok"]
    # the block's printed values, where they round to the computed ones, pass within 1 %
    printed = {**graded(), "t_snap_ms": 13.7, "rto_ms": 570.8, "t_prefill_ms": 512}
    assert nm0_5.check(None, printed)["all_ok"]
    # "additional 2.05 s" is the block's own reading, graded as that reading, not as right
    q = nm0_5.check(None, {**graded(), "full_prefill_extra_ms": 2050.0})["quantities"]["full_prefill_extra_ms"]
    assert q["status"] == "alternative" and q["reading"] == "additional_is_full_prefill"
    assert not nm0_5.check(None, {**graded(), "full_prefill_extra_ms": 1000.0})["all_ok"]
    wrong = nm0_5.check(None, {**graded(), "snapshot_holds_kv_cache": True})
    assert wrong["quantities"]["snapshot_holds_kv_cache"]["status"] == "wrong" and not wrong["all_ok"]
    assert not nm0_5.check(None, {**graded(), "delta_tokens": 4095})["all_ok"]


# --- bad givens ------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, name", [
    ({"context_tokens": 0}, "context_tokens"), ({"context_tokens": 2.5}, "context_tokens"),
    ({"snapshot_tokens": -1}, "snapshot_tokens"), ({"snapshot_mb": -1.0}, "snapshot_mb"),
    ({"wal_kb": float("nan")}, "wal_kb"), ({"disk_mb_per_s": 0.0}, "disk_mb_per_s"),
    ({"random_read_us": "25us"}, "random_read_us"), ({"prefill_tokens_per_s": True}, "prefill_tokens_per_s"),
    ({"probe_ms": None}, "probe_ms"), ({"probe_ms": float("inf")}, "probe_ms")])
def test_bad_givens_raise_config_error_naming_the_parameter(params, name):
    with pytest.raises(ConfigError, match=f"^{name} "):
        nm0_5.solve(params)


def test_a_snapshot_past_the_context_and_unknown_names_are_refused():
    with pytest.raises(ConfigError, match="^snapshot_tokens 20000 is more than context_tokens 16384"):
        nm0_5.solve({"snapshot_tokens": 20000})
    with pytest.raises(ConfigError, match="unknown parameter"):
        nm0_5.solve({"layers": 80})
    with pytest.raises(ConfigError, match="^disk_mb_per_s "):
        rto.rto_terms({**D, "disk_mb_per_s": 0})
    with pytest.raises(ConfigError, match="^kv_heads "):
        rto.ModelGivens("x", 80, 0, 128, 2)


# --- CLI ---------------------------------------------------------------------------------------------


def test_cli_solve_json_keys(capsys):
    assert main(["exercise", "solve", "nm0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(nm0_5.GRADED) <= set(out)
    assert {"params", "exercise", "decision", "decision_text", "reading", "alternative", "readings", "model",
            "chapter_printed"} <= set(out)
    assert out["params"] == nm0_5.validate_params(None) and out["exercise"] == "nm0.5"
    assert out["full_prefill_ms"] == 2048 and out["full_prefill_extra_ms"] == 1536
    assert out["model"]["layers"] == 80 and out["model"]["kv_heads"] == 8 and "Llama-2-70b" in out["model"]["source"]
    assert set(out["alternative"]) == {"additional_is_full_prefill", "random_read_per_4k_block", "binary_units",
                                       "full_multi_head_attention", "snapshot_holds_tokens_only"}


def test_cli_params_seed_and_check(tmp_path, capsys):
    assert main(["exercise", "solve", "nm0.5", "--param", "snapshot_mb=5000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["snapshot_holds_kv_cache"] is True
    assert main(["exercise", "solve", "nm0.5", "--seed", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == nm0_5.validate_params(nm0_5.generate(4))
    f = tmp_path / "answers.json"
    f.write_text(json.dumps(graded()))
    assert main(["exercise", "check", "nm0.5", "--answers", str(f)]) == 0
    assert f"{len(nm0_5.GRADED)} correct" in capsys.readouterr().out
    f.write_text(json.dumps({**graded(), "full_prefill_extra_ms": 2048}))
    assert main(["exercise", "check", "nm0.5", "--answers", str(f)]) == 1
    assert "additional_is_full_prefill" in capsys.readouterr().out
    assert main(["exercise", "solve", "nm0.5", "--param", "snapshot_tokens=99999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "snapshot_tokens" in err[0]


def test_the_float_tolerance_is_one_percent():
    g = graded()
    assert nm0_5.check(None, {**g, "kv_snapshot_rto_ms": g["kv_snapshot_rto_ms"] * 1.009})["all_ok"]
    assert not nm0_5.check(None, {**g, "kv_snapshot_rto_ms": g["kv_snapshot_rto_ms"] * 1.02})["all_ok"]
    assert math.isclose(g["t_wal_ms"], 0.128 / 3.5 + 0.025)


def test_cli_text_solve_prints_the_readings_as_rows_not_json(capsys):
    """Invariant: the text output is for a reader: each reading of the snapshot on its own line as
    ``name value`` pairs, numbers to six significant digits, no JSON list of objects."""
    from kernel_lib.cli import main

    assert main(["exercise", "solve", "nm0.5"]) == 0
    out = capsys.readouterr().out
    assert '[{"reading"' not in out and "  readings:" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("    - reading ")]
    readings = nm0_5.solve(nm0_5.DEFAULTS)["readings"]
    assert [r.split(",")[0] for r in rows] == [f"    - reading {x['reading']}" for x in readings]
    assert "rto_ms 570.776" in rows[0]
