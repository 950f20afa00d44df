"""Failure Recovery, Napkin Math 0.1 (exercise nm0.1): the solver against the chapter's printed
figures and its own givens, the documented readings, the id forms, the CLI, and the same quantities
measured on a real log on disk.

The generic checks every registered exercise passes (seeds, wrong answers, notebooks, papermill)
are in test_exercises.py; grading a notebook is in test_exercise_grade.py.
"""

from __future__ import annotations

import json

import pytest

from kernel_lib.cli import main
from kernel_lib.course.exercises import EXERCISES, accept_readings, canonical_id, format_report, get
from kernel_lib.course.exercises import nm0_1
from kernel_lib.errors import ConfigError

D = nm0_1.DEFAULTS


def graded(params=None) -> dict:
    sol = nm0_1.solve(params)
    return {k: sol[k] for k in nm0_1.GRADED}


# --- ids -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["nm0.1", "NM0.1", "nm0_1", " Nm0_1 ", "nm00.1"])
def test_every_form_of_the_id_names_napkin_math_0_1(form):
    assert get(form) is nm0_1 and canonical_id(form) == "nm0.1"


def test_chapter_11_aliases_still_work_and_unknown_ids_list_what_exists():
    assert get("4") is get("11.4") is get("ex11_4") is get("EX11.4")
    for bad in ("nm0.9", "ex0.9", "nm1.1", "0.1", "12.1"):
        with pytest.raises(ConfigError) as err:
            get(bad)
        listed = str(err.value).split("available: ", 1)[1].split(", ")
        assert listed == list(EXERCISES) and "nm0.1" in listed and "nm0.9" not in listed


# --- the solver against the chapter and its givens -------------------------------------------------


def test_defaults_reproduce_the_figures_the_chapter_computes():
    """The block's arithmetic that does follow from its givens (printed in the chapter)."""
    s = nm0_1.solve()
    assert s["forward_ms"] == 5200 and s["forward_fsyncs"] == 10 and s["forward_io_ms"] == pytest.approx(12)
    assert s["unwind_fsyncs"] == 4 and s["unwind_io_ms"] == pytest.approx(4.8)
    assert s["log_io_ms"] == pytest.approx(16.8) and s["unwind_ms"] == pytest.approx(294.8)
    assert s["token_cost_usd"] == pytest.approx(0.07395) and round(s["unwind_speedup"], 1) == 17.6


def test_solution_follows_from_the_givens_for_seeded_variants():
    for seed in range(30):
        p = nm0_1.validate_params(nm0_1.generate(seed))
        s = nm0_1.solve(p)
        n = len(p["forward_step_ms"])
        fwd_io = n * p["fsyncs_per_forward_step"] * p["fsync_ms"]
        unwind_io = (n - 1) * p["fsyncs_per_compensator"] * p["fsync_ms"]
        unwind = sum(p["compensator_ms"]) + unwind_io
        total = sum(p["forward_step_ms"]) + fwd_io + unwind
        assert s["log_io_ms"] == pytest.approx(fwd_io + unwind_io)
        assert s["log_share_of_total"] == pytest.approx((fwd_io + unwind_io) / total)
        assert s["chapter_share_claim_holds"] is ((fwd_io + unwind_io) / total < 0.003)
        assert s["unwind_speedup"] == pytest.approx(sum(p["forward_step_ms"]) / unwind)
        # C2 is done once C_n-1 … C2 ran, each followed by its pop's barriers
        assert s["ip_release_done_ms"] == pytest.approx(sum(p["compensator_ms"][1:])
                                                        + (n - 2) * p["fsyncs_per_compensator"] * p["fsync_ms"])
        assert s["token_cost_usd"] == pytest.approx(p["input_tokens"] * p["input_usd_per_mtok"] / 1e6
                                                    + p["output_tokens"] * p["output_usd_per_mtok"] / 1e6)


def test_the_printed_figures_that_do_not_follow_are_shown_beside_the_computed_ones():
    rows = {r["claim"]: r for r in nm0_1.chapter_figures()}
    s = nm0_1.solve()
    assert not rows["trajectory length"]["holds"] and "6-step" in rows["trajectory length"]["printed"]
    share = rows["log share of the trajectory"]
    assert not share["holds"] and s["log_share_of_total"] > 0.003
    assert f"{s['log_share_of_total']:.3%}" in share["computed"]
    assert rows["IP released"]["holds"] and s["ip_release_done_ms"] < s["unwind_ms"]
    assert all(r["note"] for r in rows.values())


def test_the_committed_steps_reading_is_the_one_under_which_the_bound_holds():
    s = nm0_1.solve()
    alt = s["alternative"]["committed_steps_only"]
    k = len(D["forward_step_ms"]) - 1
    assert alt["forward_fsyncs"] == k * D["fsyncs_per_forward_step"] and alt["chapter_share_claim_holds"] is True
    assert s["chapter_share_claim_holds"] is False


def test_an_answer_of_a_documented_reading_is_named_and_accepted_on_request():
    good = graded()
    alt = nm0_1.solve()["alternative"]
    answers = {**good, "forward_fsyncs": alt["committed_steps_only"]["forward_fsyncs"],
               "unwind_speedup": alt["reversed_steps_only"]["unwind_speedup"]}
    report = nm0_1.check(None, answers)
    q = report["quantities"]
    assert q["forward_fsyncs"]["status"] == "alternative" and q["forward_fsyncs"]["reading"] == "committed_steps_only"
    assert q["unwind_speedup"]["reading"] == "reversed_steps_only" and not report["all_ok"]
    assert "matches the reading 'committed_steps_only'" in format_report(report)
    assert accept_readings(report)["all_ok"]


def test_money_is_formatted_as_money():
    assert nm0_1.usd(0.07395) == "$0.07395" and nm0_1.usd(0.0552) == "$0.0552" and nm0_1.usd(1234.5) == "$1,234.50"
    assert nm0_1.usd(0.0) == "$0"
    text = nm0_1.solve()["decision_text"]
    assert nm0_1.usd(nm0_1.solve()["token_cost_usd"]) in text


# --- CLI -----------------------------------------------------------------------------------------


def test_cli_solve_prints_money_shares_and_readings_for_a_reader(capsys):
    """Newcomer report: the human output showed token_cost_usd 0.07395, a share as a bare fraction
    and the alternative readings as one JSON dump. Money and shares now print as the grading
    report prints them, one reading a line; --json keeps the plain numbers."""
    sol = nm0_1.solve()
    assert main(["exercise", "solve", "nm0.1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines()
            if line.startswith("  ") and len(line.split()) == 2}
    assert rows["token_cost_usd"] == "$0.07395" and rows["input_cost_usd"] == "$0.0552"
    assert rows["log_share_of_total"] == f"{sol['log_share_of_total'] * 100:.6g}%" == "0.305077%"
    assert rows["forward_fsyncs"] == "10" and rows["chapter_share_claim_holds"] == "false"
    readings = out.split("answers under the alternative readings:\n", 1)[1].splitlines()
    assert [line.split(":")[0].strip() for line in readings] == list(sol["alternative"])
    share = sol["alternative"]["share_of_forward_time"]["log_share_of_total"]
    assert (f"  share_of_forward_time: log_share_of_total {share * 100:.6g}%, chapter_share_claim_holds false"
            in readings)
    assert "{" not in out.split("answers under the alternative readings:")[1]
    assert main(["exercise", "solve", "nm0.1", "--json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["token_cost_usd"] == sol["token_cost_usd"]
    assert raw["alternative"] == json.loads(json.dumps(sol["alternative"]))


def test_cli_solve_generate_and_check(tmp_path, capsys):
    assert main(["exercise", "solve", "nm0.1", "--json"]) == 0
    sol = json.loads(capsys.readouterr().out)
    assert sol["params"] == nm0_1.validate_params(None) and sol["log_io_ms"] == nm0_1.solve()["log_io_ms"]
    assert main(["exercise", "generate", "NM0_1", "--seed", "3"]) == 0
    assert json.loads(capsys.readouterr().out) == nm0_1.validate_params(nm0_1.generate(3))
    f = tmp_path / "answers.json"
    good = graded()
    cases = {"right": (good, 0, "14 correct"),
             "wrong": ({**good, "log_io_ms": good["log_io_ms"] * 2}, 1, "NO "),
             "reading": ({**good, "log_share_of_total":
                          nm0_1.solve()["alternative"]["share_of_forward_time"]["log_share_of_total"]}, 1,
                         "matches the reading 'share_of_forward_time'")}
    for name, (answers, code, text) in cases.items():
        f.write_text(json.dumps(answers))
        assert main(["exercise", "check", "nm0.1", "--answers", str(f)]) == code, name
        out = capsys.readouterr().out
        assert text in out and "Napkin Math 0.1" in out, (name, out)
    assert main(["exercise", "solve", "nm0.1", "--param", "compensator_ms=1,2"]) == 2
    assert capsys.readouterr().err.startswith("error: compensator_ms must hold one duration per committed step")


# --- measured on this machine ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured():
    from kernel_lib.course.exercises.nm0_1_measure import measure_deployment
    return {store: measure_deployment(store, repeats=2, raw_repeats=10) for store in ("segment", "sqlite")}


@pytest.mark.parametrize("store", ["segment", "sqlite"])
def test_measured_barriers_match_the_chapter_counts(measured, store):
    """The runner's barriers per forward step and per pop, counted on a real log, are the chapter's
    fsyncs_per_forward_step and fsyncs_per_compensator; the unwind ends with one closing barrier."""
    m = measured[store]
    assert m["label"] == "measured on this machine" and m["state"] == "ABORT_CONSISTENT"
    assert m["forward_steps"] == len(D["forward_step_ms"]) and m["compensator_pops"] == len(D["compensator_ms"])
    assert m["barriers_per_forward_step"] == D["fsyncs_per_forward_step"]
    assert m["barriers_per_compensator_pop"] == D["fsyncs_per_compensator"]
    assert m["unwind_closing_barriers"] == 1
    assert m["raw_fdatasync_median_ms"] > 0 and m["forward_ms"] > 0 and m["unwind_ms"] > 0


def test_the_file_system_saw_the_fdatasyncs_the_log_counted(measured):
    """Counted at the segment store's file-system seam, not by the log handle: each barrier is one
    real fdatasync."""
    m = measured["segment"]
    assert m["fdatasyncs_per_forward_step"] == m["barriers_per_forward_step"]
    assert m["fdatasyncs_per_compensator_pop"] == m["barriers_per_compensator_pop"]
    assert m["fdatasync_in_log_median_ms"] > 0 and 0 < m["unwind_fdatasync_ms"] < m["unwind_ms"]


def test_the_services_applied_each_compensator_exactly_once(measured):
    """Judged by the services' own counts: every committed step's effect and its compensator applied once,
    the refused DNS record never applied."""
    counts = measured["segment"]["service_counts"]
    applied = {action: n for c in counts.values() for action, n in c["applied"].items()}
    for action in ("provision_sandbox", "teardown_sandbox", "reserve_ip", "release_ip", "compile_binary",
                   "clean_build", "bind_firewall", "unbind_firewall"):
        assert applied.get(action) == 1, (action, applied)
    assert not applied.get("publish_dns")


def test_measure_refuses_bad_arguments():
    from kernel_lib.course.exercises.nm0_1_measure import measure_deployment
    for kw in ({"store": "etcd"}, {"repeats": 0}, {"repeats": True}):
        with pytest.raises(ConfigError):
            measure_deployment(**kw)
