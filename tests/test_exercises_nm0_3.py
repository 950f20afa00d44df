"""Failure Recovery, Napkin Math 0.3 (exercise nm0.3, what an undetected loop costs): the solver
against the chapter's printed figures and a turn-by-turn sum of its own givens, the three named
readings, bad givens, and the CLI.

The generic checks every registered exercise passes (seeds, wrong answers, notebooks under
papermill) are in test_exercises.py and test_exercise_grade.py. Expected values are computed here
turn by turn (a loop, not the closed form), or are the chapter's printed, rounded text.
"""

from __future__ import annotations

import json

import pytest

from kernel_lib.cli import main
from kernel_lib.course.exercises import accept_readings, canonical_id, format_report, get
from kernel_lib.course.exercises import nm0_3
from kernel_lib.errors import ConfigError

D = nm0_3.DEFAULTS


def graded(params=None) -> dict:
    sol = nm0_3.solve(params)
    return {k: sol[k] for k in nm0_3.GRADED}


def by_turns(p: dict, turns: int, growth: int | None = None) -> dict:
    """The loop simulated turn by turn: each turn sends the context so far, then the context grows."""
    growth = p["output_tokens_per_turn"] + p["error_tokens_per_turn"] if growth is None else growth
    context, sent = p["first_turn_tokens"], 0
    for _ in range(turns):
        sent += context
        context += growth
    out_tokens = turns * p["output_tokens_per_turn"]
    usd = (sent * p["input_usd_per_mtok"] + out_tokens * p["output_usd_per_mtok"]) / 1e6
    return {"input_tokens": sent, "usd": usd, "s": turns * p["turn_s"]}


def test_every_form_of_the_id_names_napkin_math_0_3():
    for form in ("nm0.3", "NM0.3", "nm0_3", " Nm0_3 "):
        assert get(form) is nm0_3 and canonical_id(form) == "nm0.3"


def test_the_parameter_names_and_defaults_are_the_issues():
    assert D == {"first_turn_tokens": 1000, "output_tokens_per_turn": 300, "error_tokens_per_turn": 800,
                 "turn_s": 10.0, "turn_ceiling": 50, "detect_turn": 4, "input_usd_per_mtok": 3.0,
                 "output_usd_per_mtok": 15.0}
    assert [p.name for p in nm0_3.PARAMS] == list(D)


def test_the_defaults_give_the_chapters_printed_figures():
    s = nm0_3.solve()
    assert s["ceiling_input_tokens"] == 1_397_500 and s["detect_input_tokens"] == 10_600
    assert f"${s['ceiling_usd']:.2f}" == "$4.42" and f"${s['detect_usd']:.2f}" == "$0.05"
    assert round(s["ceiling_s"] / 60) == 8 and s["detect_s"] == 40
    assert round(s["cost_ratio"]) == 89
    rows = nm0_3.chapter_figures()
    assert all(r["holds"] for r in rows), [r for r in rows if not r["holds"]]
    ratio_row = next(r for r in rows if r["claim"] == "cheaper by")
    assert "88.4" in ratio_row["note"]          # the rounded printed dollars give 88, not 89


def test_a_changed_given_makes_a_printed_figure_fail():
    s = nm0_3.solve({"error_tokens_per_turn": 900})
    assert s["ceiling_input_tokens"] != 1_397_500
    assert s["delta_tokens_per_turn"] == 1200


@pytest.mark.parametrize("seed", range(25))
def test_the_solver_matches_the_loop_summed_turn_by_turn(seed):
    p = nm0_3.validate_params(nm0_3.generate(seed))
    s = nm0_3.solve(p)
    ceiling, detect = by_turns(p, p["turn_ceiling"]), by_turns(p, p["detect_turn"])
    assert s["delta_tokens_per_turn"] == p["output_tokens_per_turn"] + p["error_tokens_per_turn"]
    assert s["ceiling_input_tokens"] == ceiling["input_tokens"] and s["detect_input_tokens"] == detect["input_tokens"]
    assert s["ceiling_usd"] == pytest.approx(ceiling["usd"]) and s["detect_usd"] == pytest.approx(detect["usd"])
    assert s["ceiling_s"] == pytest.approx(ceiling["s"]) and s["detect_s"] == pytest.approx(detect["s"])
    assert s["cost_ratio"] == pytest.approx(ceiling["usd"] / detect["usd"])
    # the loop's cost grows faster than its length: the dollar ratio beats the ratio of turns
    if p["detect_turn"] < p["turn_ceiling"]:
        assert s["cost_ratio"] > p["turn_ceiling"] / p["detect_turn"]


def test_the_series_is_derived_by_sympy():
    import sympy as sp
    n, delta = sp.symbols("n Delta", positive=True, integer=True)
    s0 = nm0_3.SYMBOLS[0]
    assert sp.simplify(nm0_3.formulas()["input_tokens_series"] - (n * s0 + delta * n * (n - 1) / 2)) == 0


# --- the named readings ------------------------------------------------------------------------------


def test_the_alternative_readings_are_computed_from_their_own_assumptions():
    alt = nm0_3.solve()["alternative"]
    err = alt["error_only_context"]
    h = by_turns(D, 50, growth=D["error_tokens_per_turn"])
    assert err["ceiling_input_tokens"] == h["input_tokens"] == 1_030_000 and err["delta_tokens_per_turn"] == 800
    assert err["cost_ratio"] == pytest.approx(h["usd"] / by_turns(D, 4, growth=800)["usd"])
    before = alt["stop_before_detect_turn"]
    h3 = by_turns(D, 3)
    assert before["detect_input_tokens"] == h3["input_tokens"] == 6_300 and before["detect_s"] == 30
    assert alt["token_ratio"]["cost_ratio"] == pytest.approx(1_397_500 / 10_600)


@pytest.mark.parametrize("reading, names", [
    ("error_only_context", ("delta_tokens_per_turn", "ceiling_input_tokens", "ceiling_usd", "detect_input_tokens",
                            "detect_usd", "cost_ratio")),
    ("stop_before_detect_turn", ("detect_input_tokens", "detect_usd", "detect_s", "cost_ratio")),
    ("token_ratio", ("cost_ratio",)),
])
def test_an_answer_of_a_named_reading_is_graded_alternative_and_accepted_on_request(reading, names):
    alt = nm0_3.solve()["alternative"][reading]
    report = nm0_3.check(None, {**graded(), **{n: alt[n] for n in names}})
    for n in names:
        q = report["quantities"][n]
        assert q["status"] == "alternative" and q["reading"] == reading and not q["ok"]
    assert not report["all_ok"] and report["score"] == len(nm0_3.GRADED) - len(names)
    assert f"matches the reading '{reading}'" in format_report(report)
    assert accept_readings(report)["all_ok"]


def test_right_answers_pass_and_wrong_ones_fail():
    assert nm0_3.check(None, graded())["all_ok"]
    wrong = nm0_3.check(None, {**graded(), "ceiling_input_tokens": 1_397_501})     # token counts are exact
    assert wrong["quantities"]["ceiling_input_tokens"]["status"] == "wrong" and not accept_readings(wrong)["all_ok"]
    near = {**graded(), "ceiling_usd": 4.4175 + 4e-7, "cost_ratio": 88.7 * 1.009}
    assert nm0_3.check(None, near)["all_ok"]
    assert not nm0_3.check(None, {**graded(), "cost_ratio": 89 * 1.02})["all_ok"]
    assert nm0_3.check(None, {**graded(), "ceiling_s": 500})["all_ok"]           # an int answer for seconds


def test_detecting_at_the_first_turn_has_no_before_reading_ratio():
    s = nm0_3.solve({"detect_turn": 1})
    assert "cost_ratio" not in s["alternative"]["stop_before_detect_turn"]
    assert s["detect_input_tokens"] == D["first_turn_tokens"]


def test_detecting_at_the_ceiling_saves_nothing():
    s = nm0_3.solve({"detect_turn": 50})
    assert s["cost_ratio"] == 1 and s["saved_usd"] == 0 and s["decision"] == "no_saving"


# --- bad givens ------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, name", [
    ({"first_turn_tokens": 0}, "first_turn_tokens"), ({"first_turn_tokens": 10.5}, "first_turn_tokens"),
    ({"output_tokens_per_turn": -1}, "output_tokens_per_turn"), ({"error_tokens_per_turn": "800"},
                                                                 "error_tokens_per_turn"),
    ({"turn_s": 0}, "turn_s"), ({"turn_s": float("nan")}, "turn_s"), ({"turn_ceiling": 0}, "turn_ceiling"),
    ({"detect_turn": True}, "detect_turn"), ({"input_usd_per_mtok": 0.0}, "input_usd_per_mtok"),
    ({"output_usd_per_mtok": None}, "output_usd_per_mtok")])
def test_bad_givens_raise_config_error_naming_the_parameter(params, name):
    with pytest.raises(ConfigError, match=f"^{name} "):
        nm0_3.solve(params)


def test_a_detect_turn_after_the_ceiling_is_refused():
    with pytest.raises(ConfigError, match="detect_turn 51 is after turn_ceiling 50"):
        nm0_3.solve({"detect_turn": 51})
    with pytest.raises(ConfigError, match="unknown parameter"):
        nm0_3.solve({"turns": 5})


# --- CLI ---------------------------------------------------------------------------------------------


def test_cli_solve_json_keys(capsys):
    assert main(["exercise", "solve", "nm0.3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(nm0_3.GRADED) <= set(out)
    assert {"params", "exercise", "decision", "decision_text", "reading", "alternative", "token_ratio",
            "time_ratio", "saved_usd"} <= set(out)
    assert out["params"] == nm0_3.validate_params(None) and out["exercise"] == "nm0.3"
    assert out["ceiling_input_tokens"] == 1_397_500 and out["detect_input_tokens"] == 10_600
    assert set(out["alternative"]) == {"error_only_context", "stop_before_detect_turn", "token_ratio"}


def test_cli_params_and_check(tmp_path, capsys):
    assert main(["exercise", "solve", "nm0.3", "--param", "turn_ceiling=100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ceiling_input_tokens"] == by_turns({**D, "turn_ceiling": 100}, 100)["input_tokens"]
    f = tmp_path / "answers.json"
    f.write_text(json.dumps(graded()))
    assert main(["exercise", "check", "nm0.3", "--answers", str(f)]) == 0
    assert f"{len(nm0_3.GRADED)} correct" in capsys.readouterr().out
    assert main(["exercise", "solve", "nm0.3", "--param", "detect_turn=99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


# --- the live loop's measured cost beside the exercise (nm0_3_measure) ----------------------------------


@pytest.fixture(scope="module")
def measured():
    from kernel_lib.course.exercises.nm0_3_measure import measure_loop
    return measure_loop()


def test_the_measured_loop_is_the_live_agents_own_turns_priced_at_the_exercises_givens(measured):
    m, g = measured["measured"], measured["givens"]
    assert g == nm0_3.validate_params() and measured["label"] == "measured on the live looping agent"
    assert [t for t, _ in measured["interventions"]] == [1, 2, 3]
    start, d = m["loop_first_turn"], m["turns_to_detection"]
    window = slice(start - 1, start - 1 + d)   # turns are numbered from 1
    assert m["input_tokens_to_detection"] == sum(m["input_tokens_per_turn"][window])
    assert m["output_tokens_to_detection"] == sum(m["output_tokens_per_turn"][window])
    usd = (m["input_tokens_to_detection"] * g["input_usd_per_mtok"]
           + m["output_tokens_to_detection"] * g["output_usd_per_mtok"]) / 1e6
    assert m["usd_to_detection"] == pytest.approx(usd, abs=1e-6)
    # the projection to the ceiling is the loop summed turn by turn with the measured s0, Δ and output
    mg = measured["measured_givens"]
    turned = by_turns({**mg, "output_tokens_per_turn": m["output_tokens_per_turn_mean"]}, g["turn_ceiling"],
                      growth=m["growth_tokens_per_turn"])
    assert m["ceiling_input_tokens_projected"] == round(turned["input_tokens"])
    assert m["usd_to_ceiling_projected"] == pytest.approx(turned["usd"], abs=1e-6)
    assert m["usd_ratio_ceiling_to_detection"] > g["turn_ceiling"] / d   # the loop's cost grows faster than n


def test_the_formula_at_the_measured_givens_describes_the_measured_loop(measured):
    """The agent's context keeps only each action's outcome (the error_only_context reading): the
    arithmetic series with the measured s0 and Δ gives the measured tokens to detection closely."""
    from kernel_lib.course.exercises.nm0_3_measure import READING, comparison_rows

    m, nm = measured["measured"], measured["napkin_measured"]
    assert measured["reading"] == READING == "error_only_context"
    assert nm["delta_tokens_per_turn"] == measured["measured_givens"]["error_tokens_per_turn"]
    assert nm["detect_input_tokens"] == pytest.approx(m["input_tokens_to_detection"], rel=0.05)
    rows = comparison_rows(measured)
    assert [r["napkin"] for r in rows[3:5]] == [10_600, pytest.approx(0.0498)]   # the chapter's own figures
    assert all(set(r) == {"quantity", "napkin", "measured", "napkin_measured"} for r in rows)


def test_other_prices_and_ceilings_reprice_the_same_measured_tokens(measured):
    from kernel_lib.course.exercises.nm0_3_measure import measure_loop

    again = measure_loop({"input_usd_per_mtok": 6.0, "output_usd_per_mtok": 0.0, "turn_ceiling": 20})
    m, m2 = measured["measured"], again["measured"]
    assert m2["input_tokens_to_detection"] == m["input_tokens_to_detection"]   # the same seeded run
    assert m2["usd_to_detection"] == pytest.approx(m["input_tokens_to_detection"] * 6.0 / 1e6, abs=1e-6)
    assert m2["turn_ceiling"] == 20 and m2["ceiling_input_tokens_projected"] < m["ceiling_input_tokens_projected"]
    with pytest.raises(ConfigError, match="detect_turn"):
        measure_loop({"turn_ceiling": 2})
