"""The seeded exercises (every one in the registry: §11.12's 11.N and Failure Recovery's nm0.N): solver,
generator, grader, CLI, notebooks and their sync. Exercise-specific checks of 2, 3, 5 and 9 (chapter figures,
properties) are in test_exercises_checkpoint.py, of nm0.1 in test_exercises_recovery.py."""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from kernel_lib.cli import main
from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises import EXERCISES, get, notebook_name
from kernel_lib.course.strip import render, strip_source, sync
from tests.helpers import network_dependent_outputs, wrong_answer

ROOT = Path(__file__).resolve().parents[1]
IDS = list(EXERCISES)
NB_NAME = {k: notebook_name(k) for k in IDS}
#: What the first cell of each solution names as its source.
SOURCE_MARK = {k: "Napkin Math 0." + k[4:] if k.startswith("nm0.") else "Example 0." + k[4:] if k.startswith("ex0.")
               else "§11.12" for k in IDS}
#: The seeded variants each solution notebook is also run with under papermill (besides its defaults).
#: One is enough to show a generated variant flows through the parameters cell into every answer;
#: many seeds are checked at the Python level (test_check_of_the_solution_is_all_ok_for_many_seeds),
#: where a run costs milliseconds instead of a kernel start (issue 15: suite time).
PAPERMILL_SEEDS = (11,)
#: The generic solution run takes only the seeded variants: a variant's answers all come out right
#: only if every answer cell computes from the injected parameters, which a run at the defaults
#: cannot tell from a typed-in value; the defaults themselves run in the student copy (every cell
#: but the answers, test_exercise_notebook_runs_unanswered) and in-process (test_default_answers_*).
SOLUTION_VARIANTS = PAPERMILL_SEEDS
# Exercises whose notebooks run in a module of their own, with the same variants (defaults and
# PAPERMILL_SEEDS) and every check of the two papermill tests below plus their own (issue 15: each
# of these notebooks ran twice per variant).
OWN_NOTEBOOK_RUNS = {"11.6": "test_exercises_resume.py", "11.7": "test_exercises_retention.py"}
RUN_IDS = [k for k in IDS if k not in OWN_NOTEBOOK_RUNS]


def graded_answers(mod, params):
    sol = mod.solve(params)
    return {k: sol[k] for k in mod.GRADED}


# --- solver ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ex", IDS)
def test_defaults_give_finite_numbers_and_a_decision(ex):
    mod = get(ex)
    sol = mod.solve(mod.DEFAULTS)
    assert sol == mod.solve()  # no params means the defaults
    for name in mod.GRADED:
        v = sol[name]
        if isinstance(v, float):
            assert math.isfinite(v), name
    assert sol["decision"] and sol["decision_text"]
    assert sol["reading"] and sol["alternative"]  # the reading taken, and the alternative's answers


def test_default_answers_11_1():
    s = get("11.1").solve()
    assert (s["process_crash_ack_ms"], s["host_crash_ack_ms"]) == (0.02, 0.4)
    assert s["required_replica_indices"] == [1, 2] and s["placement_ack_ms"] == 6.5
    assert s["placement_ack_fraction"] == pytest.approx(6.5 / 4006.5)
    assert s["alternative"]["placement_ack_fraction_of_work"] == pytest.approx(6.5 / 4000)
    assert s["majority_ack_ms"] == 2.5 and s["majority_saving_per_dispatch_ms"] == 4.0
    assert s["majority_saving_per_trajectory_ms"] == pytest.approx(160.0)
    assert s["majority_offvolume_copies"] == 1
    assert s["majority_survives_worker_volume_loss"] is True
    assert s["majority_satisfies_contract"] is False and s["decision"] == "reject"


def test_default_answers_11_4():
    s = get("11.4").solve()
    assert s["unbatched_capacity_per_s"] == 200 and s["unbatched_queue_growth_per_s"] == 1800
    assert s["single_flight_min_batch"] == 10
    assert (s["single_flight_first_wait_ms"], s["single_flight_last_wait_ms"]) == (9.5, 5.0)
    assert s["single_flight_meets_budget"] is False and s["single_flight_utilization_margin"] == 0
    assert s["two_flight_min_batch"] == 5 and s["two_flight_first_wait_ms"] == 7.0
    assert s["two_flight_amortized_storage_ms"] == 1.0 and s["two_flight_meets_budget"] is True
    assert s["page_cache_ack_acceptable"] is False
    assert s["alternative"]["strict_slack"]["single_flight_min_batch"] == 11


def test_chapter_group_commit_example_follows_from_eq_2():
    # §11.3.4: 2 ms timer, 4 ms quorum flush, batch of 16
    assert get("11.4").chapter_example(2.0, 4.0, 16) == {"amortized_storage_ms": 0.25, "first_wait_ms": 6.0,
                                                         "last_wait_ms": 4.0}


def test_default_answers_11_8():
    s = get("11.8").solve()
    lam = 2 / 3600
    assert s["lag_window_probability"] == pytest.approx(-math.expm1(-lam * 0.2))
    assert s["lag_window_failures_per_year"] == pytest.approx(100 * -math.expm1(-lam * 0.2))
    assert s["lag_window_expected_loss_usd"] == pytest.approx(133.33, abs=0.01)
    assert s["partition_expected_loss_usd"] == pytest.approx(1_200_000 * -math.expm1(-lam * 60))
    assert s["quorum_latency_per_worker_day_ms"] == pytest.approx(312.0)
    assert s["quorum_latency_fraction_of_approval_wait"] == pytest.approx(6.5e-3 / 900)
    assert s["lag_window_recovery_state"] == "in_doubt"
    assert len(s["violated_rules"]) >= 2


@pytest.mark.parametrize("ex", IDS)
def test_check_of_the_solution_is_all_ok_for_many_seeds(ex):
    mod = get(ex)
    for seed in range(150):
        params = mod.generate(seed)
        assert mod.generate(seed) == params, "generate must be deterministic"
        assert set(params) == set(mod.DEFAULTS)
        report = mod.check(params, graded_answers(mod, params))
        assert report["all_ok"], (seed, params, report)


@pytest.mark.parametrize("ex", IDS)
def test_seeds_give_different_variants(ex):
    mod = get(ex)
    assert len({json.dumps(mod.generate(s), sort_keys=True) for s in range(20)}) > 10


@pytest.mark.parametrize("ex", IDS)
def test_a_wrong_answer_fails_check(ex):
    mod = get(ex)
    for seed in (None, 3):
        params = mod.generate(seed) if seed is not None else mod.DEFAULTS
        good = graded_answers(mod, params)
        for name in mod.GRADED:
            report = mod.check(params, {**good, name: wrong_answer(good[name])})
            assert not report["all_ok"] and not report["quantities"][name]["ok"], name
            assert sum(not q["ok"] for q in report["quantities"].values()) == 1
        # missing, misspelt and wrongly typed answers fail too
        name = next(iter(mod.GRADED))
        assert not mod.check(params, {k: v for k, v in good.items() if k != name})["all_ok"]
        assert mod.check(params, {**good, name + "_typo": 1})["unknown_answers"] == [name + "_typo"]
        assert not mod.check(params, {**good, name + "_typo": 1})["all_ok"]
        assert not mod.check(params, {**good, name: "not a number"})["all_ok"]


def test_tolerances_are_relative():
    mod = get("11.4")
    good = graded_answers(mod, None)
    assert mod.check(None, {**good, "single_flight_first_wait_ms": 9.5 * 1.009})["all_ok"]
    assert not mod.check(None, {**good, "single_flight_first_wait_ms": 9.5 * 1.02})["all_ok"]
    q = mod.check(None, good)["quantities"]["single_flight_first_wait_ms"]
    assert set(q) >= {"expected", "given", "ok", "tolerance"} and "1%" in q["tolerance"]


@pytest.mark.parametrize("ex,bad", [
    ("11.1", {"nope": 1}),
    ("11.1", {"dispatch_count": 40.5}),
    ("11.1", {"dispatch_count": "forty"}),
    ("11.1", {"dispatch_count": True}),
    ("11.1", {"work_per_turn_s": -1.0}),
    ("11.1", {"replica_durable_ms": [1.0]}),
    ("11.1", {"replica_durable_ms": "1.5,2.5"}),
    ("11.1", {"colocated_replica_index": 3}),
    ("11.1", {"required_offvolume_copies": 3}),
    ("11.4", {"flush_ms": 0}),
    ("11.4", {"intent_rate_per_s": float("nan")}),
    ("11.8", {"worker_count": 0}),
    ("11.8", {"duplicate_cost_usd": -5}),
    ("nm0.1", {"compensator_ms": [45, 220, 15]}),
    ("nm0.1", {"forward_step_ms": [120]}),
    ("nm0.1", {"fsync_ms": "fast"}),
])
def test_bad_params_raise_config_error(ex, bad):
    with pytest.raises(ConfigError):
        get(ex).solve(bad)


def test_unknown_exercise():
    for bad in ("11.42", "12.1", "eleven"):
        with pytest.raises(ConfigError):
            get(bad)
    assert get("4") is get("11.4") is get("ex11_4")
    assert get("nm0.1") is get("NM0.1") is get("nm0_1")
    for bad in ("nm0.9", "ex0.9"):   # Failure Recovery ids not built (yet) are unknown, not guessed
        with pytest.raises(ConfigError, match="available: 11.1, "):
            get(bad)


# --- CLI -----------------------------------------------------------------------------------------


def test_cli_round_trip(tmp_path, capsys):
    for ex in IDS:
        assert main(["exercise", "generate", ex, "--seed", "5"]) == 0
        params = json.loads(capsys.readouterr().out)
        assert params == get(ex).validate_params(get(ex).generate(5))
        assert main(["exercise", "solve", ex, "--seed", "5", "--json"]) == 0
        sol = json.loads(capsys.readouterr().out)
        assert sol["params"] == params and sol["decision"]
        answers = tmp_path / f"{ex}.json"
        answers.write_text(json.dumps({k: sol[k] for k in get(ex).GRADED}))
        assert main(["exercise", "check", ex, "--seed", "5", "--answers", str(answers)]) == 0
        out = capsys.readouterr().out
        assert "correct" in out
        pf = tmp_path / f"{ex}.params.json"
        pf.write_text(json.dumps(params))
        assert main(["exercise", "check", ex, "--params", str(pf), "--answers", str(answers), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["all_ok"] is True
        # the same answers against the defaults are (for these seeds) wrong
        assert main(["exercise", "check", ex, "--answers", str(answers)]) == 1
        capsys.readouterr()


def test_cli_param_overrides(capsys):
    assert main(["exercise", "solve", "11.4", "--json", "--param", "flush_ms=2.5"]) == 0
    sol = json.loads(capsys.readouterr().out)
    assert sol["params"]["flush_ms"] == 2.5 and sol["single_flight_min_batch"] == 5
    assert main(["exercise", "solve", "11.1", "--json", "--param", "replica_durable_ms=1,2,3,4,5",
                 "--param", "required_offvolume_copies=2"]) == 0
    sol = json.loads(capsys.readouterr().out)
    assert sol["majority_quorum_size"] == 3 and sol["majority_satisfies_contract"] is True
    assert main(["exercise", "solve", "11.8"]) == 0
    assert "decision:" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["exercise", "solve", "11.4", "--param", "nope=1"],
    ["exercise", "solve", "11.4", "--param", "flush_ms=abc"],
    ["exercise", "solve", "11.4", "--param", "flush_ms=-3"],
    ["exercise", "solve", "11.4", "--param", "flush_ms"],
    ["exercise", "solve", "11.1", "--param", "dispatch_count=2.5"],
    ["exercise", "solve", "11.1", "--param", "replica_durable_ms=a,b"],
    ["exercise", "solve", "11.42"],
    ["exercise", "check", "11.4", "--answers", "/nonexistent/answers.json"],
])
def test_cli_bad_input_is_one_error_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err


def test_cli_bad_answers_file(tmp_path, capsys):
    f = tmp_path / "a.json"
    for text in ("not json", "[1, 2]"):
        f.write_text(text)
        assert main(["exercise", "check", "11.8", "--answers", str(f)]) == 2
        assert capsys.readouterr().err.startswith("error:")


def test_cli_as_module_and_help():
    r = subprocess.run([sys.executable, "-m", "kernel_lib", "exercise", "solve", "11.4", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["two_flight_min_batch"] == 5
    h = subprocess.run([sys.executable, "-m", "kernel_lib", "exercise", "check", "--help"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert h.returncode == 0 and "--answers" in h.stdout and "exit" in h.stdout


# --- notebooks: single source, sync, papermill -------------------------------------------------


def test_strip_source_regions():
    src = "a = 1\n    # BEGIN SOLUTION\n    b = 2\n    # END SOLUTION\nc = 3"
    assert strip_source(src) == "a = 1\n    # your answer here\nc = 3"
    for bad in ("# BEGIN SOLUTION\nx", "# END SOLUTION", "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION"):
        with pytest.raises(ConfigError):
            strip_source(bad)


@pytest.mark.parametrize("ex", IDS)
def test_committed_exercise_is_the_stripped_solution(ex):
    sol, exe = ROOT / "solutions" / NB_NAME[ex], ROOT / "exercises" / NB_NAME[ex]
    assert exe.read_text() == render(sol), (
        f"{exe} drifted from {sol}: run `python -m kernel_lib exercise strip` and commit both")
    nb = nbformat.read(exe, as_version=4)
    text = exe.read_text()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_sync_check_reports_drift(tmp_path):
    out = tmp_path / "exercises"
    sync(ROOT / "solutions", out)
    assert sync(ROOT / "solutions", out, check=True) == []
    victim = out / NB_NAME["11.4"]
    victim.write_text(victim.read_text().replace("your answer here", "my answer"))
    (out / "stray.ipynb").write_text("{}")
    problems = sync(ROOT / "solutions", out, check=True)
    assert len(problems) == 2 and any("differs" in p for p in problems) and any("stray" in p for p in problems)


@pytest.mark.parametrize("ex", IDS)
def test_parameters_cell_has_exactly_the_defaults(ex):
    for folder in ("solutions", "exercises"):
        nb = nbformat.read(ROOT / folder / NB_NAME[ex], as_version=4)
        cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(cells) == 1
        found = {}
        for node in ast.parse(cells[0].source).body:
            assert isinstance(node, ast.Assign)
            found[node.targets[0].id] = ast.literal_eval(node.value)
        assert found == get(ex).DEFAULTS


@pytest.mark.parametrize("ex", IDS)
def test_solution_notebooks_are_committed_clean(ex):
    nb = nbformat.read(ROOT / "solutions" / NB_NAME[ex], as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert SOURCE_MARK[ex] in nb.cells[0].source


def _run(path: Path, out: Path, params: dict | None = None) -> nbformat.NotebookNode:
    pm.execute_notebook(str(path), str(out), parameters=params or {}, cwd=str(path.parent),
                        kernel_name="python3", progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if o.output_type == "error"]
    assert not network_dependent_outputs(nb)          # the course machine is offline
    return nb


def _check_output(nb) -> str:
    cell = next(c for c in nb.cells if c.get("id") == "check")
    return "".join(o.get("text", "") for o in cell.outputs)


@pytest.mark.parametrize("variant", SOLUTION_VARIANTS, ids=[f"seed{s}" for s in SOLUTION_VARIANTS])
@pytest.mark.parametrize("ex", RUN_IDS)
def test_solution_notebook_runs_and_its_answers_pass_check(ex, variant, tmp_path):
    params = get(ex).generate(variant)
    assert params != get(ex).DEFAULTS, f"{ex}: seed {variant} gives the defaults, so the run shows nothing"
    nb = _run(ROOT / "solutions" / NB_NAME[ex], tmp_path / "out.ipynb", params)
    n = len(get(ex).GRADED)
    assert f"{n} of {n} quantities answered, {n} correct" in _check_output(nb)
    for cell in nb.cells:
        if cell.get("id") == "chart":   # the altair chart was built and rendered
            assert any("image/svg+xml" in o.get("data", {}) for o in cell.outputs), "chart cell drew no chart"
        if cell.get("id") == "decision":   # the decision paragraph is computed, and computed to real numbers
            text = "".join(str(o.get("data", {}).get("text/markdown", "")) for o in cell.outputs)
            assert "Decision" in text and not re.search(r"\b(nan|inf)\b", text), text


@pytest.mark.parametrize("ex", sorted(OWN_NOTEBOOK_RUNS))
def test_notebooks_left_out_here_run_in_their_own_module(ex):
    """What RUN_IDS leaves out is run elsewhere: the solution with this module's variants and the
    unanswered student copy, checked for the same report lines."""
    src = (ROOT / "tests" / OWN_NOTEBOOK_RUNS[ex]).read_text()
    assert f'"solutions" / "{NB_NAME[ex]}"' in src and f'"exercises" / "{NB_NAME[ex]}"' in src
    assert '[None, *PAPERMILL_SEEDS]' in src and "from tests.test_exercises import PAPERMILL_SEEDS" in src
    assert "quantities answered, {n} correct" in src and "0 of {len(mod().GRADED)} quantities answered" in src
    assert '" expected " not in out' in src and "image/svg+xml" in src and r"\b(nan|inf)\b" in src


@pytest.mark.parametrize("ex", RUN_IDS)
def test_exercise_notebook_runs_unanswered(ex, tmp_path):
    nb = _run(ROOT / "exercises" / NB_NAME[ex], tmp_path / "out.ipynb")
    out = _check_output(nb)
    assert f"0 of {len(get(ex).GRADED)} quantities answered" in out
    assert " expected " not in out  # the student's report does not give the answers away
