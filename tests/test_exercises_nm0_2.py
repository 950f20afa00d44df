"""Failure Recovery, Napkin Math 0.2 (exercise nm0.2, forward repair vs. compensate and rerun): the
solver against the chapter's printed figures and its own givens, the decision rule, the documented
unwind-only reading of gate 3's formula, bad givens, and the CLI.

The generic checks every registered exercise passes (seeds, wrong answers, notebooks, papermill) are
in test_exercises.py and test_exercise_grade.py. Every expected value here is computed from the givens
(or is the chapter's printed, rounded text), never copied from the solver.
"""

from __future__ import annotations

import json

import pytest
import sympy as sp

from kernel_lib.cli import main
from kernel_lib.course.exercises import accept_readings, canonical_id, format_report, get
from kernel_lib.course.exercises import nm0_2
from kernel_lib.errors import ConfigError

D = nm0_2.DEFAULTS


def graded(params=None) -> dict:
    sol = nm0_2.solve(params)
    return {k: sol[k] for k in nm0_2.GRADED}


def by_hand(p: dict) -> dict:
    """The block's arithmetic in plain floats, independent of the module's sympy forms."""
    back_s = p["compensation_s"] + p["forward_s"]
    back_usd = (p["input_tokens"] * p["input_usd_per_mtok"] + p["output_tokens"] * p["output_usd_per_mtok"]) / 1e6
    rep_s = p["repair_output_tokens"] / p["decode_tokens_per_s"] + p["validation_s"]
    rep_usd = (p["repair_input_tokens"] * p["input_usd_per_mtok"]
               + p["repair_output_tokens"] * p["output_usd_per_mtok"]) / 1e6
    q = p["repair_success_p"]
    return {"unwind_rerun_s": back_s, "unwind_rerun_usd": back_usd, "repair_s": rep_s, "repair_usd": rep_usd,
            "breakeven_p_time": rep_s / back_s, "breakeven_p_dollars": rep_usd / back_usd,
            "repair_first_expected_s": rep_s + (1 - q) * back_s,
            "repair_first_expected_usd": rep_usd + (1 - q) * back_usd,
            "repair_first": q > rep_s / back_s and q > rep_usd / back_usd}


# --- ids and parameter names -------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["nm0.2", "NM0.2", "nm0_2", " Nm0_2 "])
def test_every_form_of_the_id_names_napkin_math_0_2(form):
    assert get(form) is nm0_2 and canonical_id(form) == "nm0.2"


def test_the_parameter_names_and_defaults_are_the_issues():
    assert D == {"forward_s": 46.0, "compensation_s": 40.6, "input_tokens": 38500, "output_tokens": 3100,
                 "repair_input_tokens": 2390, "repair_output_tokens": 180, "decode_tokens_per_s": 50.0,
                 "validation_s": 0.5, "input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0,
                 "repair_success_p": 0.5}
    assert [p.name for p in nm0_2.PARAMS] == list(D)


# --- the solver against the chapter ---------------------------------------------------------------


def test_defaults_reproduce_the_figures_the_chapter_prints():
    """Each printed figure, as printed (rounded), against the computed value rounded the same way."""
    s = nm0_2.solve()
    assert f"{s['unwind_rerun_s']:.1f}" == "86.6" and f"{s['unwind_rerun_usd']:.3f}" == "0.162"
    assert f"{s['repair_s']:.1f}" == "4.1" and f"{s['repair_usd']:.3f}" == "0.010"
    assert f"{s['repair_decode_s']:.1f}" == "3.6"          # the text's 4.1 s = 3.6 s decode + validation
    assert f"{s['breakeven_p_time'] * 100:.0f}" == "5" and f"{s['breakeven_p_dollars'] * 100:.0f}" == "6"
    assert f"{s['repair_first_expected_s']:.1f}" == "47.4" and f"{s['repair_first_expected_usd']:.3f}" == "0.091"
    assert s["repair_first"] is True and s["decision"] == "repair_first" and s["budgets_agree"] is True
    assert s["unwind_rerun_usd"] == pytest.approx(by_hand(D)["unwind_rerun_usd"])   # compensators add no dollars


def test_chapter_figures_list_each_printed_figure_and_whether_it_follows():
    rows = nm0_2.chapter_figures()
    printed = {r["printed"] for r in rows}
    assert {"86.6 s", "$0.162", "4.1 s", "$0.010", "5 percent", "6 percent", "47.4 s", "$0.091"} <= printed
    for r in rows:
        assert set(r) == {"claim", "printed", "computed", "holds", "note"} and r["note"]
        if r["printed"] in printed - {"Cost(a_repair) + (1 − P)·U(Σ)"}:
            assert r["holds"] is (r["computed"] == r["printed"]), r
    figures = [r for r in rows if "formula" not in r["claim"]]
    assert all(r["holds"] for r in figures), [r for r in figures if not r["holds"]]
    gap = next(r for r in rows if "formula" in r["claim"])
    assert gap["holds"] is False and "U(Σ)" in gap["printed"]


def test_a_figure_that_does_not_follow_is_reported_as_such(monkeypatch):
    """chapter_figures compares, it does not assert: with another validation time the 4.1 s no longer holds."""
    monkeypatch.setitem(nm0_2.DEFAULTS, "validation_s", 0.9)
    rows = {r["printed"]: r for r in nm0_2.chapter_figures()}
    assert rows["4.1 s"]["holds"] is False and rows["4.1 s"]["computed"] == "4.5 s"
    assert rows["$0.162"]["holds"] is True


def test_the_break_even_is_solved_and_equals_repair_cost_over_backing_out():
    f = nm0_2.formulas()
    T, U, Ni, No, ni, no, r, tv, pi, po, p = nm0_2.SYMBOLS
    assert sp.simplify(f["breakeven_p_time"] - (no / r + tv) / (U + T)) == 0
    assert sp.simplify(f["breakeven_p_dollars"] - (ni * pi + no * po) / (Ni * pi + No * po)) == 0
    # at p = p* trying repair first costs exactly what backing out does
    for budget, back in (("time", "unwind_rerun_s"), ("dollars", "unwind_rerun_usd")):
        suffix = "s" if budget == "time" else "usd"
        at = f[f"repair_first_expected_{suffix}"].xreplace({p: f[f"breakeven_p_{budget}"]})
        assert sp.simplify(at - f[back]) == 0


# --- seeded variants ---------------------------------------------------------------------------------


def test_seeded_variants_follow_from_their_givens():
    for seed in range(60):
        params = nm0_2.validate_params(nm0_2.generate(seed))
        s, h = nm0_2.solve(params), by_hand(params)
        for name, value in h.items():
            assert s[name] == (value if isinstance(value, bool) else pytest.approx(value, rel=1e-9)), (seed, name)
        assert s["repair_first_saving_s"] == pytest.approx(h["unwind_rerun_s"] - h["repair_first_expected_s"])
        assert s["decision"] == ("repair_first" if h["repair_first"] else "compensate_and_rerun")


def test_the_decision_flips_between_seeds_and_never_hinges_on_rounding():
    decisions, disagreements = set(), 0
    for seed in range(100):
        params = nm0_2.generate(seed)
        s = nm0_2.solve(params)
        decisions.add(s["decision"])
        disagreements += not s["budgets_agree"]
        q = params["repair_success_p"]
        for edge in (s["breakeven_p_time"], s["breakeven_p_dollars"]):
            assert abs(q - edge) > 0.02 * max(q, edge), (seed, q, edge)
    assert decisions == {"repair_first", "compensate_and_rerun"}
    assert disagreements > 0        # some variants pay on one budget only


def test_when_the_budgets_disagree_the_answer_is_compensate():
    # break-even on time 4.1 / 86.6 ≈ 4.7 %, on dollars ≈ 6.1 %: p = 5.5 % pays on time only
    s = nm0_2.solve({"repair_success_p": 0.055})
    assert s["repair_pays_on_time"] and not s["repair_pays_on_dollars"] and not s["budgets_agree"]
    assert s["repair_first"] is False and s["decision"] == "compensate_and_rerun"
    assert "time" in s["decision_text"] and "both" in s["decision_text"]
    # a later failure (more to rerun) lowers the bar: the same p now pays on both
    later = nm0_2.solve({"repair_success_p": 0.055, "input_tokens": 77000, "output_tokens": 6200})
    assert later["repair_first"] is True and later["breakeven_p_dollars"] < s["breakeven_p_dollars"]


def test_a_repair_dearer_than_backing_out_never_pays():
    s = nm0_2.solve({"forward_s": 1.0, "compensation_s": 1.0, "repair_success_p": 1.0})
    assert s["breakeven_p_time"] > 1 and s["repair_first"] is False and "never pays" in s["decision_text"]


# --- the unwind-only reading of gate 3's formula -----------------------------------------------------


def test_the_unwind_only_reading_is_computed_from_the_displayed_formula():
    s = nm0_2.solve()
    alt = s["alternative"]["unwind_only"]
    h = by_hand(D)
    assert alt["breakeven_p_time"] == pytest.approx(h["repair_s"] / D["compensation_s"])
    assert alt["repair_first_expected_s"] == pytest.approx(h["repair_s"] + 0.5 * D["compensation_s"])
    assert alt["repair_first_expected_usd"] == pytest.approx(h["repair_usd"])   # unwinding costs no tokens
    assert alt["unwind_rerun_s"] == D["compensation_s"] and alt["unwind_rerun_usd"] == 0
    assert "breakeven_p_dollars" not in alt        # no dollar break-even: backing out costs $0 under it
    assert alt["breakeven_p_time"] > 2 * s["breakeven_p_time"]


def test_the_alternative_reading_is_named_and_accepted_only_on_request():
    alt = nm0_2.solve()["alternative"]["unwind_only"]
    answers = {**graded(), "breakeven_p_time": alt["breakeven_p_time"],
               "repair_first_expected_s": alt["repair_first_expected_s"]}
    report = nm0_2.check(None, answers)
    q = report["quantities"]
    for name in ("breakeven_p_time", "repair_first_expected_s"):
        assert q[name]["status"] == "alternative" and q[name]["reading"] == "unwind_only" and not q[name]["ok"]
    assert not report["all_ok"] and report["score"] == len(nm0_2.GRADED) - 2
    assert "matches the reading 'unwind_only'" in format_report(report)
    accepted = accept_readings(report)
    assert accepted["all_ok"] and accepted["score"] == len(nm0_2.GRADED)
    # a plain wrong answer is not rescued by the reading
    wrong = nm0_2.check(None, {**graded(), "breakeven_p_time": 0.5})
    assert wrong["quantities"]["breakeven_p_time"]["status"] == "wrong" and not accept_readings(wrong)["all_ok"]


def test_dollar_answers_are_graded_with_half_a_millionth_absolute():
    good = graded()
    near = {**good, "repair_usd": good["repair_usd"] + 4e-7}
    assert nm0_2.check(None, near)["all_ok"]
    far = {**good, "repair_usd": good["repair_usd"] * 1.02}
    assert not nm0_2.check(None, far)["all_ok"]


# --- bad givens ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, name", [
    ({"forward_s": -1.0}, "forward_s"), ({"forward_s": 0}, "forward_s"), ({"compensation_s": "40.6"}, "compensation_s"),
    ({"input_tokens": 0}, "input_tokens"), ({"output_tokens": 12.5}, "output_tokens"),
    ({"repair_input_tokens": -1}, "repair_input_tokens"), ({"repair_output_tokens": True}, "repair_output_tokens"),
    ({"decode_tokens_per_s": 0}, "decode_tokens_per_s"), ({"validation_s": float("nan")}, "validation_s"),
    ({"input_usd_per_mtok": 0.0}, "input_usd_per_mtok"), ({"output_usd_per_mtok": None}, "output_usd_per_mtok"),
    ({"repair_success_p": 1.5}, "repair_success_p"), ({"repair_success_p": -0.1}, "repair_success_p")])
def test_bad_givens_raise_config_error_naming_the_parameter(params, name):
    with pytest.raises(ConfigError, match=f"^{name} "):
        nm0_2.solve(params)


def test_an_unknown_parameter_is_refused():
    with pytest.raises(ConfigError, match="unknown parameter 'p'"):
        nm0_2.solve({"p": 0.5})
    with pytest.raises(ConfigError):
        nm0_2.check(None, [1, 2])


# --- CLI ---------------------------------------------------------------------------------------------


def test_cli_solve_json_keys(capsys):
    assert main(["exercise", "solve", "nm0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(nm0_2.GRADED) <= set(out)
    assert {"params", "exercise", "decision", "decision_text", "reading", "alternative", "repair_decode_s",
            "repair_pays_on_time", "repair_pays_on_dollars", "budgets_agree"} <= set(out)
    assert out["params"] == nm0_2.validate_params(None) and out["exercise"] == "nm0.2"
    assert out["unwind_rerun_s"] == nm0_2.solve()["unwind_rerun_s"]
    assert set(out["alternative"]) == {"unwind_only"}


def test_cli_solve_prints_money_as_money_and_check_grades(tmp_path, capsys):
    sol = nm0_2.solve()
    assert main(["exercise", "solve", "nm0.2"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines()
            if line.startswith("  ") and len(line.split()) == 2}
    assert rows["repair_usd"] == "$0.00987" and rows["unwind_rerun_usd"] == "$0.162"
    assert "Napkin Math 0.2" in out and "decision: repair_first" in out
    assert nm0_2.usd(sol["repair_first_expected_usd"]) in sol["decision_text"]
    f = tmp_path / "answers.json"
    f.write_text(json.dumps(graded()))
    assert main(["exercise", "check", "nm0.2", "--answers", str(f)]) == 0
    assert f"{len(nm0_2.GRADED)} correct" in capsys.readouterr().out
    assert main(["exercise", "check", "nm0.2", "--seed", "4", "--answers", str(f), "--json"]) in (0, 1)
    capsys.readouterr()


@pytest.mark.parametrize("argv", [
    ["exercise", "solve", "nm0.2", "--param", "repair_success_p=2"],
    ["exercise", "solve", "nm0.2", "--param", "forward_s=fast"],
    ["exercise", "solve", "nm0.2", "--param", "nope=1"],
])
def test_cli_bad_input_is_one_error_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
