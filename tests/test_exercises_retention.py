"""§11.12 exercise 7 (retention for the research agent): answers recomputed here from the givens with
plain arithmetic (1 KB = 1000 B, 1 GB = 10^9 B), the readings' alternatives, the grader and its hints for
answers of the wrong kind, seeded variants, the notebooks under papermill, their strip drift, and the CLI.

The generic machinery of test_exercises.py is parametrized over the registry, but leaves this
exercise's notebooks to the papermill tests here (``OWN_NOTEBOOK_RUNS``): they run with the same
variants, make the generic checks and add what is specific to exercise 7 (the Napkin Math 11.2 table,
the promises table, the decision's figures).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import papermill as pm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.cli import main
from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises import EXERCISES, get
from kernel_lib.course.strip import render, sync
from tests.helpers import network_dependent_outputs, wrong_answer
from tests.test_exercises import PAPERMILL_SEEDS

ROOT = Path(__file__).resolve().parents[1]
EX = "11.7"
#: the givens as the issue names them
DEFAULTS = {"turns": 20, "pages": 100, "envelope_kb_per_turn": 4, "observation_kb_per_turn": 40, "page_kb_raw": 300,
            "usd_per_gb_month": 0.023, "replay_months": 12, "attempt_cost_usd": 1.50, "raw_page_months": 1,
            "trajectories": 1000000}
GB = 1e9
KB = 1e3


def mod():
    return get(EX)


def graded_answers(params):
    sol = mod().solve(params)
    return {k: sol[k] for k in mod().GRADED}


def expected_numbers(p):
    """Every float the exercise grades, from the givens, without kernel_lib."""
    inputs_gb = p["turns"] * (p["envelope_kb_per_turn"] + p["observation_kb_per_turn"]) * KB / GB
    raw_gb = p["pages"] * p["page_kb_raw"] * KB / GB
    price, months = p["usd_per_gb_month"], p["replay_months"]
    inputs_usd = inputs_gb * price * months
    raw_usd = raw_gb * price * months
    sizes = {"envelopes": p["turns"] * p["envelope_kb_per_turn"],
             "observations": p["turns"] * p["observation_kb_per_turn"],
             "raw_pages": p["pages"] * p["page_kb_raw"]}
    top = max(sizes, key=sizes.get)
    return {
        "recovery_replay_gb_per_trajectory": inputs_gb,
        "raw_pages_gb_per_trajectory": raw_gb,
        "recovery_replay_usd_per_trajectory": inputs_usd,
        "recovery_replay_share_of_attempt": inputs_usd / p["attempt_cost_usd"],
        "raw_pages_usd_per_trajectory": raw_usd,
        "raw_pages_share_of_attempt": raw_usd / p["attempt_cost_usd"],
        "fleet_full_retention_usd_per_year": (inputs_usd + raw_usd) * p["trajectories"],
        "fleet_policy_usd_per_year": (inputs_usd + raw_gb * price * p["raw_page_months"]) * p["trajectories"],
        "dominant_artifact": top,
        "dominant_share_of_bytes": sizes[top] / sum(sizes.values()),
        "dominant_required_for_recovery": top != "raw_pages",
    }


# --- registry and default answers ---------------------------------------------------------------


def test_registered_with_the_issues_papermill_names():
    assert EX in EXERCISES and mod().EXERCISE == EX
    assert mod().DEFAULTS == DEFAULTS
    assert [p.name for p in mod().PARAMS] == list(DEFAULTS)


def test_default_answers_from_plain_arithmetic():
    s = mod().solve()
    # 20 turns x (4 + 40) KB = 880 KB; 100 pages x 300 KB = 30 MB
    assert s["recovery_replay_gb_per_trajectory"] == pytest.approx(20 * 44 * 1000 / 1e9)
    assert s["raw_pages_gb_per_trajectory"] == pytest.approx(100 * 300 * 1000 / 1e9)
    year_inputs = 20 * 44 * 1000 / 1e9 * 0.023 * 12
    year_raw = 100 * 300 * 1000 / 1e9 * 0.023 * 12
    assert s["recovery_replay_usd_per_trajectory"] == pytest.approx(year_inputs)
    assert s["recovery_replay_share_of_attempt"] == pytest.approx(year_inputs / 1.5)
    assert s["raw_pages_usd_per_trajectory"] == pytest.approx(year_raw)
    assert s["raw_pages_share_of_attempt"] == pytest.approx(year_raw / 1.5)
    assert s["fleet_full_retention_usd_per_year"] == pytest.approx((year_inputs + year_raw) * 1e6)
    month_raw = 100 * 300 * 1000 / 1e9 * 0.023 * 1
    assert s["fleet_policy_usd_per_year"] == pytest.approx((year_inputs + month_raw) * 1e6)
    assert s["dominant_artifact"] == "raw_pages"
    assert s["dominant_share_of_bytes"] == pytest.approx(30_000 / 30_880)
    assert s["dominant_required_for_recovery"] is False
    assert s["policy_keeps_historical_replay"] is True and s["policy_keeps_current_recovery"] is True
    assert s["delivered_input_method"] == "fold_recorded_projection"
    assert s["earliest_boundary"] == "assembled_model_input"
    assert s["evidence_artifacts"] == "envelopes_and_observations"
    assert s["establishes_causal_influence"] is False
    assert s["branch_adds"] == "effect_in_this_trajectory"
    assert s["repair_dominant_artifact"] == "workspace" and s["repair_dominant_required_for_recovery"] is True
    assert s["decision"] == "split_lifetimes"


def test_default_answers_against_the_expected_numbers_helper():
    s = mod().solve()
    for name, v in expected_numbers(DEFAULTS).items():
        assert s[name] == (pytest.approx(v) if isinstance(v, float) else v), name


def test_the_repair_comparison_comes_from_napkin_math_11_2():
    s = mod().solve()
    assert s["repair_dominant_share_of_bytes"] == pytest.approx(50 / (50 + 3.96))
    assert s["repair_workspace_mb_inferred"] == 50
    bill = (50 + 3.96) / 1000 * 0.023 * 12
    assert s["repair_attempt_cost_usd_inferred"] == pytest.approx(bill / 0.007)
    # under the same price and promise, the research agent's whole bill is a smaller share of its attempt
    assert s["full_retention_share_of_attempt"] < s["repair_share_of_attempt"]


def test_alternative_readings():
    s = mod().solve()
    alt = s["alternative"]
    binary = alt["binary_units"]
    assert binary["recovery_replay_gb_per_trajectory"] == pytest.approx(880_000 / 2 ** 30)
    assert binary["raw_pages_usd_per_trajectory"] == pytest.approx(30e6 / 2 ** 30 * 0.023 * 12)
    # at the defaults the promise is a year, and no lifetime outlasts the first year
    assert alt["exactly_12_months"]["raw_pages_usd_per_trajectory"] == pytest.approx(s["raw_pages_usd_per_trajectory"])
    cohort = alt["first_calendar_year_of_a_cohort"]
    assert cohort["fleet_policy_usd_per_year"] == pytest.approx(s["fleet_policy_usd_per_year"])
    # a two-year promise: the cohort's first year holds only 12 of its 24 months
    s24 = mod().solve({"replay_months": 24})
    cohort24 = s24["alternative"]["first_calendar_year_of_a_cohort"]
    assert cohort24["fleet_full_retention_usd_per_year"] == pytest.approx(s24["fleet_full_retention_usd_per_year"] / 2)
    assert s24["alternative"]["exactly_12_months"]["recovery_replay_usd_per_trajectory"] == pytest.approx(
        s24["recovery_replay_usd_per_trajectory"] / 2)
    assert {"inputs", "units", "year", "fleet", "full_retention", "notebook_11_2", "boundary"} <= set(s["reading"])


def test_policy_table_prices_and_promises():
    rows = {r["policy"]: r for r in mod().policy_table(DEFAULTS)}
    assert set(rows) == {"full", "proposed", "digest_only", "raw_instead"}
    assert rows["proposed"]["fleet_usd_per_year"] == pytest.approx(mod().solve()["fleet_policy_usd_per_year"])
    assert rows["digest_only"]["keeps_current_recovery"] and not rows["digest_only"]["keeps_historical_replay"]
    assert not rows["raw_instead"]["keeps_current_recovery"] and not rows["raw_instead"]["keeps_historical_replay"]
    assert rows["digest_only"]["usd_per_trajectory"] < rows["proposed"]["usd_per_trajectory"]


def test_observations_can_dominate_and_then_recovery_needs_them():
    s = mod().solve({"pages": 5, "page_kb_raw": 80, "turns": 60, "observation_kb_per_turn": 96})
    assert s["dominant_artifact"] == "observations" and s["dominant_required_for_recovery"] is True
    assert "a recovery and replay promise reads them" in s["decision_text"]


# --- check(): round trip, perturbed answers, hints for answers of the wrong kind -----------------


@pytest.mark.parametrize("seed", [None, 0, 11, 12])
def test_check_round_trip_and_every_perturbed_answer_fails(seed):
    params = mod().generate(seed) if seed is not None else None
    good = graded_answers(params)
    assert mod().check(params, good)["all_ok"]
    for name in mod().GRADED:
        report = mod().check(params, {**good, name: wrong_answer(good[name])})
        assert not report["all_ok"] and not report["quantities"][name]["ok"], name
        assert sum(not q["ok"] for q in report["quantities"].values()) == 1


def test_a_half_percent_slip_passes_and_a_two_percent_slip_fails():
    good = graded_answers(None)
    v = good["fleet_policy_usd_per_year"]
    assert mod().check(None, {**good, "fleet_policy_usd_per_year": v * 1.005})["all_ok"]
    assert not mod().check(None, {**good, "fleet_policy_usd_per_year": v * 1.02})["all_ok"]


def _hint(name, value, params=None):
    good = graded_answers(params)
    report = mod().check(params, {**good, name: value})
    q = report["quantities"][name]
    assert not q["ok"] and not report["all_ok"], (name, value)
    return q.get("hint", "")


def test_gib_for_gb_is_rejected_with_a_binary_units_hint():
    inputs_bytes = 20 * 44 * 1000
    assert "binary" in _hint("recovery_replay_gb_per_trajectory", inputs_bytes / 2 ** 30)
    assert "binary" in _hint("raw_pages_gb_per_trajectory", 100 * 300 * 1024 / 1e9)      # KiB pages, decimal GB
    assert "binary" in _hint("raw_pages_usd_per_trajectory", 30e6 / 2 ** 30 * 0.023 * 12)
    assert "binary" in _hint("fleet_full_retention_usd_per_year", 30.88e6 / 2 ** 30 * 0.023 * 12 * 1e6)
    assert "MB" in _hint("raw_pages_gb_per_trajectory", 30.0)                            # 30 MB typed as GB


def test_months_and_years_mixed_up_are_rejected_with_a_month_hint():
    one_month = 30e6 / 1e9 * 0.023                       # the price for one month, not the 12-month promise
    assert "one month" in _hint("raw_pages_usd_per_trajectory", one_month)
    twelve_years = 30e6 / 1e9 * 0.023 * 12 * 12          # months counted as years
    assert "months counted as years" in _hint("raw_pages_usd_per_trajectory", twelve_years)
    share_per_month = 880e3 / 1e9 * 0.023 / 1.5
    assert "one month" in _hint("recovery_replay_share_of_attempt", share_per_month)
    # with a different promise the hint names it
    assert "18 months" in _hint("raw_pages_usd_per_trajectory", one_month, {"replay_months": 18})


def test_percent_cents_fleet_and_policy_slips_get_their_hints():
    share = 30e6 / 1e9 * 0.023 * 12 / 1.5
    assert "percentage" in _hint("raw_pages_share_of_attempt", share * 100)
    assert "percentage" in _hint("dominant_share_of_bytes", 100 * 30_000 / 30_880)
    assert "cents" in _hint("raw_pages_usd_per_trajectory", 30e6 / 1e9 * 0.023 * 12 * 100)
    per_trajectory = (880e3 * 12 + 30e6) / 1e9 * 0.023
    assert "one trajectory" in _hint("fleet_policy_usd_per_year", per_trajectory)
    full = 30.88e6 / 1e9 * 0.023 * 12 * 1e6
    assert "full retention" in _hint("fleet_policy_usd_per_year", full)
    assert _hint("fleet_policy_usd_per_year", 5000.0) == ""          # an unrelated wrong number: no hint


def test_wrong_choices_get_a_reason():
    assert "new execution" in _hint("delivered_input_method", "fresh_rerun")
    assert "harness" in _hint("delivered_input_method", "regression_replay")
    assert "bounded" in _hint("evidence_artifacts", "raw_pages")
    assert "digest" in _hint("evidence_artifacts", "envelopes_only")
    assert "not that it produced" in _hint("establishes_causal_influence", True)
    assert "never delivered" in _hint("dominant_required_for_recovery", True)
    assert "workspace" in _hint("repair_dominant_required_for_recovery", False)
    assert _hint("establishes_causal_influence", "no") == ""          # wrong type: the common hint covers it


def test_format_report_prints_the_hints_and_the_common_ones():
    good = graded_answers(None)
    report = mod().check(None, {**good, "raw_pages_gb_per_trajectory": 30e6 / 2 ** 30,
                                "fleet_policy_usd_per_year": "932.88"})
    text = mod().format_report(report)
    assert "17 correct" in text
    assert "hint for raw_pages_gb_per_trajectory: binary units" in text
    assert "(a number written as text: drop the quotes)" in text        # _common's hint, unchanged
    assert " expected " not in text and " expected " in mod().format_report(report, reveal=True)


# --- variants and bad givens -----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10 ** 9))
def test_generated_variants_are_valid_and_match_plain_arithmetic(seed):
    params = mod().generate(seed)
    assert params == mod().generate(seed) and set(params) == set(DEFAULTS)
    p = mod().validate_params(params)
    assert p["raw_page_months"] <= p["replay_months"]
    s = mod().solve(p)
    assert mod().check(p, {k: s[k] for k in mod().GRADED})["all_ok"]
    for name, v in expected_numbers(p).items():
        assert s[name] == (pytest.approx(v) if isinstance(v, float) else v), (name, p)
    assert s["fleet_policy_usd_per_year"] <= s["fleet_full_retention_usd_per_year"] * (1 + 1e-12)
    assert s["policy_keeps_historical_replay"] is True


def test_variants_reach_both_dominant_classes():
    dominant = {mod().solve(mod().generate(seed))["dominant_artifact"] for seed in range(80)}
    assert dominant == {"raw_pages", "observations"}


@pytest.mark.parametrize("bad", [
    {"turns": 0},
    {"turns": 2.5},
    {"pages": -1},
    {"page_kb_raw": -300},
    {"usd_per_gb_month": 0},
    {"usd_per_gb_month": float("nan")},
    {"replay_months": float("inf")},
    {"attempt_cost_usd": 0},
    {"raw_page_months": 13},                       # longer than the replay promise
    {"envelope_kb_per_turn": 0, "observation_kb_per_turn": 0},
    {"trajectories": True},
    {"trajectories": "a million"},
    {"nope": 1},
])
def test_bad_params_raise_config_error(bad):
    with pytest.raises(ConfigError):
        mod().solve(bad)


# --- notebooks, strip drift and CLI ---------------------------------------------------------------


def _run(path: Path, out: Path, params: dict | None = None) -> nbformat.NotebookNode:
    pm.execute_notebook(str(path), str(out), parameters=params or {}, cwd=str(path.parent), kernel_name="python3",
                        progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not network_dependent_outputs(nb)
    return nb


def _text(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") + str(o.get("data", {}).get("text/markdown", "")) for o in cell.outputs)


@pytest.mark.parametrize("variant", [None, *PAPERMILL_SEEDS], ids=["defaults", *(f"seed{s}" for s in PAPERMILL_SEEDS)])
def test_solution_notebook_runs_and_passes_check(variant, tmp_path):
    params = mod().generate(variant) if variant is not None else None
    nb = _run(ROOT / "solutions" / "ex11_7.ipynb", tmp_path / "out.ipynb", params)
    n = len(mod().GRADED)
    assert f"{n} of {n} quantities answered, {n} correct" in _text(nb, "check")
    assert "keeps_historical_replay" in _text(nb, "work2")
    napkin = _text(nb, "work4")
    assert "share_of_attempt_percent" in napkin and "workspace 50 MB" in napkin
    chart = next(c for c in nb.cells if c.get("id") == "chart")
    assert any("image/svg+xml" in o.get("data", {}) for o in chart.outputs)
    decision = _text(nb, "decision")
    assert "Decision" in decision and not re.search(r"\b(nan|inf)\b", decision)
    if variant is None:
        assert "$8,522.88" in decision and "$932.88" in decision and "raw pages (97.2%" in decision


def test_exercise_notebook_runs_unanswered(tmp_path):
    nb = _run(ROOT / "exercises" / "ex11_7.ipynb", tmp_path / "out.ipynb")
    out = _text(nb, "check")
    assert f"0 of {len(mod().GRADED)} quantities answered" in out and " expected " not in out
    source = "\n".join(c.source for c in nbformat.read(ROOT / "exercises" / "ex11_7.ipynb", as_version=4).cells)
    assert "BEGIN SOLUTION" not in source and "# your answer here" in source
    assert not re.search(r'^answers\["delivered_input_method"\] = ', source, re.MULTILINE)    # the solutions are gone
    assert "repair = rt.napkin_11_2(" not in source and "Decision." not in source
    assert "rt.napkin_11_2()" in source and "python -m kernel_lib exercise check 11.7" in source   # the pointers stay


def test_exercise_notebook_is_the_stripped_solution(tmp_path):
    assert (ROOT / "exercises" / "ex11_7.ipynb").read_text() == render(ROOT / "solutions" / "ex11_7.ipynb")
    out = tmp_path / "exercises"
    sync(ROOT / "solutions", out)
    assert sync(ROOT / "solutions", out, check=True) == []
    victim = out / "ex11_7.ipynb"
    victim.write_text(victim.read_text().replace("your answer here", "my answer"))
    assert any("ex11_7" in p and "differs" in p for p in sync(ROOT / "solutions", out, check=True))


def test_cli_solve_and_check(tmp_path, capsys):
    assert main(["exercise", "solve", EX, "--json", "--param", "raw_page_months=0.5"]) == 0
    sol = json.loads(capsys.readouterr().out)
    assert sol["fleet_policy_usd_per_year"] == pytest.approx((880e3 * 12 + 30e6 * 0.5) / 1e9 * 0.023 * 1e6)
    answers = graded_answers(None)
    f = tmp_path / "a.json"
    f.write_text(json.dumps(answers))
    assert main(["exercise", "check", EX, "--answers", str(f)]) == 0
    capsys.readouterr()
    f.write_text(json.dumps({**answers, "raw_pages_gb_per_trajectory": 30e6 / 2 ** 30}))
    assert main(["exercise", "check", EX, "--answers", str(f), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "binary" in report["quantities"]["raw_pages_gb_per_trajectory"]["hint"]
    assert main(["exercise", "solve", EX, "--param", "raw_page_months=24"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


# --- help lists 11.7; the no-change bill is phrased as such (round 6) ------------------------------


def test_exercise_help_lists_every_registered_exercise_including_11_7(capsys):
    with pytest.raises(SystemExit):
        main(["exercise", "--help"])
    top = capsys.readouterr().out
    for sub in ("solve", "check", "generate"):
        with pytest.raises(SystemExit):
            main(["exercise", sub, "--help"])
        text = capsys.readouterr().out
        assert "11.7" in " ".join(text.split())       # the exercise id's help
        if sub == "generate":                          # (no epilog on generate)
            continue
        listed = text[text.index("exercises:"):text.index("examples:")]
        assert all(k in listed for k in EXERCISES) and "11.7 (second lighthouse: retention" in listed
    listed = top[top.index("exercises:"):top.index("examples:")]
    assert all(f"{k} (" in listed for k in EXERCISES)
    with pytest.raises(SystemExit):
        main(["--help"])
    overview = " ".join(capsys.readouterr().out.split())
    assert "exercises 1, 2, 3, 4, 5, 6, 7, 8 and 9" in overview


@pytest.mark.parametrize("change,why", [({"pages": 0}, "no raw pages"), ({"page_kb_raw": 0}, "no raw pages"),
                                        ({"raw_page_months": 12}, "as long as the replay promise")])
def test_a_bill_that_does_not_change_is_not_said_to_fall(change, why):
    sol = mod().solve(mod().validate_params({**DEFAULTS, **change}))
    text = sol["decision_text"]
    full = f"${sol['fleet_full_retention_usd_per_year']:,.2f}"
    assert f"falls from {full} to {full}" not in text and "falls" not in text
    assert f"the bill stays at {full}" in text and why in text


def test_a_bill_that_changes_still_falls():
    sol = mod().solve(mod().validate_params(dict(DEFAULTS)))
    assert (f"the bill falls from ${sol['fleet_full_retention_usd_per_year']:,.2f} to "
            f"${sol['fleet_policy_usd_per_year']:,.2f}") in sol["decision_text"]
