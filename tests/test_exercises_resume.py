"""§11.12 exercise 6 (mass resume for the support agent) and its virtual-clock simulator
(kernel_lib.resume.mass): answers recomputed here from eq. 7 with plain arithmetic, the readings'
alternatives, the simulator against the closed forms where they must agree, queueing properties over
random instances (hypothesis), the notebooks run with papermill (defaults and two seeded variants, the
student copy unanswered), and the CLI.

The generic machinery of test_exercises.py is parametrized over the registry, but leaves this
exercise's notebooks to the papermill tests here (``OWN_NOTEBOOK_RUNS``): they run with the same
variants, make the generic checks and add what is specific to exercise 6 (the simulation table, the
ECDF chart, the simulated shares over the bound in the decision).
"""

from __future__ import annotations

import json
import math
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
from kernel_lib.resume.mass import (
    POLICIES,
    Policy,
    Pool,
    Stages,
    Workload,
    draw_sessions,
    fifo_schedule,
    ps_schedule,
    simulate,
)
from tests.helpers import network_dependent_outputs, wrong_answer
from tests.test_exercises import PAPERMILL_SEEDS

ROOT = Path(__file__).resolve().parents[1]
EX = "11.6"
DEFAULTS = {"sessions": 2000, "context_tokens": 8192, "shared_prefix_tokens": 6144, "customer_think_s": 20,
            "ownership_s": 0.020, "checkpoint_read_s": 0.015, "fold_s": 0.005, "in_doubt_fraction": 0.10,
            "refund_lookup_s": 0.150, "prefill_tokens_per_s_single": 20000, "pool_prefill_tokens_per_s": 400000,
            "added_latency_bound_s": 1.0}
EPS = 1e-9


def mod():
    return get(EX)


def graded_answers(params):
    sol = mod().solve(params)
    return {k: sol[k] for k in mod().GRADED}



def default_parts(**over):
    p = {**DEFAULTS, **over}
    workload = Workload(sessions=p["sessions"], context_tokens=p["context_tokens"],
                        shared_prefix_tokens=p["shared_prefix_tokens"], think_s=float(p["customer_think_s"]),
                        in_doubt_fraction=p["in_doubt_fraction"], arrivals=p.get("arrivals", "even"),
                        seed=p.get("seed", 0))
    stages = Stages(p["ownership_s"], p["checkpoint_read_s"], p["fold_s"], 0.0, p["refund_lookup_s"])
    pool = Pool(p["pool_prefill_tokens_per_s"], p["prefill_tokens_per_s_single"], p.get("discipline", "fifo"))
    return workload, stages, pool


# --- registry and default answers ---------------------------------------------------------------


def test_registered_with_its_papermill_names():
    assert EX in EXERCISES and mod().EXERCISE == EX
    assert mod().DEFAULTS == DEFAULTS
    assert [p.name for p in mod().PARAMS] == list(DEFAULTS)


def test_default_answers_from_eq_7():
    s = mod().solve()
    control = 0.020 + 0.015 + 0.005                  # ownership + read + fold; no workspace
    cold, private = 8192 / 20000, (8192 - 6144) / 20000
    assert s["clean_cold_resume_s"] == pytest.approx(control + cold) == pytest.approx(0.4496)
    assert s["in_doubt_cold_resume_s"] == pytest.approx(control + 0.150 + cold) == pytest.approx(0.5996)
    assert s["clean_resident_resume_s"] == pytest.approx(control + private) == pytest.approx(0.1424)
    assert s["in_doubt_resident_resume_s"] == pytest.approx(control + 0.150 + private) == pytest.approx(0.2924)
    assert s["eager_cold_drain_s"] == pytest.approx(2000 * 8192 / 400000) == pytest.approx(40.96)
    assert s["eager_resident_drain_s"] == pytest.approx(2000 * 2048 / 400000) == pytest.approx(10.24)
    assert s["message_rate_per_s"] == pytest.approx(100)
    assert s["proposed_policy"] == s["decision"] == "lazy_resident"
    assert s["proposed_prefill_load_fraction"] == pytest.approx(100 * 2048 / 400000) == pytest.approx(0.512)
    assert s["lazy_cold_prefill_load_fraction"] == pytest.approx(2.048)
    assert s["proposed_worst_added_latency_s"] == pytest.approx(0.2924)
    assert s["proposed_mean_added_latency_s"] == pytest.approx(0.9 * 0.1424 + 0.1 * 0.2924)
    assert s["proposed_meets_bound"] is True
    assert s["in_doubt_refund_action"] == "reconcile"
    assert s["binding_term"] == "pool_prefill_throughput"
    assert s["repair_binding_term"] == "session_prefill_latency"
    assert s["proposed_largest_stage"] == "reconciliation"       # 150 ms lookup > 102.4 ms private prefill
    assert s["repair_prefill_s_at_single_rate"] == pytest.approx(32768 / 20000)
    cands = s["candidates"]
    assert [k for k, c in cands.items() if c["meets_bound"]] == ["lazy_resident"]
    assert cands["eager_cold"]["worst_added_latency_s"] == pytest.approx(control + 40.96)


def test_alternative_readings():
    s = mod().solve()
    alt = s["alternative"]
    over = alt["overlapped_ownership_and_read"]      # max(20, 15) ms + 5 ms instead of 40 ms
    assert over["clean_cold_resume_s"] == pytest.approx(0.025 + 0.4096)
    assert over["in_doubt_resident_resume_s"] == pytest.approx(0.025 + 0.150 + 0.1024)
    beside = alt["lookup_beside_prefill"]
    assert beside["in_doubt_cold_resume_s"] == pytest.approx(0.04 + 0.4096)
    assert beside["in_doubt_resident_resume_s"] == pytest.approx(0.04 + 0.150)
    assert alt["drain_with_control_head"]["eager_cold_drain_s"] == pytest.approx(41.0)
    assert alt["drain_in_whole_slot_rounds"]["eager_resident_drain_s"] == pytest.approx(100 * 0.1024)
    assert alt["load_with_prefix_warmup"]["proposed_prefill_load_fraction"] == pytest.approx(
        0.512 + 20 * 6144 / (20 * 400000))
    assert {"workspace", "resident_prefix", "serial", "drain", "arrivals", "prefill_load", "added_latency",
            "policy_choice", "binding_term"} <= set(s["reading"])


def test_a_pool_too_small_for_every_policy_gives_none():
    s = mod().solve({"pool_prefill_tokens_per_s": 160000})     # resident on-demand load 100*2048/160k = 1.28
    assert s["proposed_policy"] == "none" and s["proposed_meets_bound"] is False
    assert s["proposed_prefill_load_fraction"] == pytest.approx(1.28)


def test_a_long_context_makes_the_session_prefill_bind():
    s = mod().solve({"context_tokens": 32768, "shared_prefix_tokens": 30720})
    assert s["in_doubt_cold_resume_s"] > 1.0 and s["binding_term"] == "session_prefill_latency"
    assert s["proposed_policy"] == "lazy_resident"      # the resident prefix still rescues it


def test_a_tiny_fleet_can_resume_eagerly():
    s = mod().solve({"sessions": 40, "in_doubt_fraction": 0.0})
    assert s["binding_term"] == "none"
    assert s["candidates"]["eager_cold"]["meets_bound"] is True


# --- check() round trip, perturbed answers, variants ---------------------------------------------


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
    assert mod().check(None, {**good, "eager_cold_drain_s": 40.96 * 1.005})["all_ok"]
    assert not mod().check(None, {**good, "eager_cold_drain_s": 40.96 * 1.02})["all_ok"]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10 ** 9))
def test_generated_variants_are_valid_and_self_consistent(seed):
    params = mod().generate(seed)
    assert params == mod().generate(seed)
    p = mod().validate_params(params)
    s = mod().solve(p)
    assert mod().check(p, {k: s[k] for k in mod().GRADED})["all_ok"]
    assert s["clean_resident_resume_s"] <= s["clean_cold_resume_s"] + EPS
    assert s["in_doubt_resident_resume_s"] - s["clean_resident_resume_s"] == pytest.approx(p["refund_lookup_s"])
    assert s["eager_resident_drain_s"] <= s["eager_cold_drain_s"] + EPS
    assert s["proposed_policy"] in mod().POLICY_CHOICES and s["binding_term"] in mod().BINDING_TERMS
    assert s["proposed_meets_bound"] == (s["proposed_policy"] != "none")


def test_variants_reach_both_verdicts():
    verdicts = {mod().solve(mod().generate(seed))["proposed_policy"] for seed in range(80)}
    assert {"lazy_resident", "none"} <= verdicts


@pytest.mark.parametrize("bad", [
    {"shared_prefix_tokens": 9000},
    {"pool_prefill_tokens_per_s": 10000},
    {"sessions": 0},
    {"sessions": 2.5},
    {"in_doubt_fraction": 1.5},
    {"customer_think_s": 0},
    {"refund_lookup_s": -0.1},
    {"added_latency_bound_s": float("nan")},
    {"nope": 1},
])
def test_bad_params_raise_config_error(bad):
    with pytest.raises(ConfigError):
        mod().solve(bad)


# --- the simulator against the closed forms -------------------------------------------------------


def test_sessions_draw_is_seeded_with_exact_in_doubt_count_and_even_slots():
    w, _, _ = default_parts()
    flags, times = draw_sessions(w)
    assert sum(flags) == 200
    assert sorted(times) == pytest.approx([(k + 0.5) * 0.01 for k in range(2000)])
    assert draw_sessions(w) == (flags, times)
    other = draw_sessions(Workload(2000, 8192, 6144, 20.0, 0.10, seed=1))
    assert other != (flags, times)
    fp, tp = draw_sessions(Workload(2000, 8192, 6144, 20.0, 0.10, arrivals="poisson", seed=3))
    assert sum(fp) == 200 and all(0 <= t <= 20 for t in tp)


@pytest.mark.parametrize("discipline", ["fifo", "ps"])
@pytest.mark.parametrize("policy", ["lazy_cold", "lazy_resident"])
def test_without_contention_every_added_latency_is_the_serial_resume_time(policy, discipline):
    w, st_, _ = default_parts(sessions=300)
    pool = Pool(300 * 20000, 20000, discipline)          # a prefill slot for every session
    r = simulate(w, st_, pool, POLICIES[policy])
    resident = POLICIES[policy].prefix_resident
    s = mod().solve({"sessions": 300})
    clean = s["clean_resident_resume_s"] if resident else s["clean_cold_resume_s"]
    doubt = s["in_doubt_resident_resume_s"] if resident else s["in_doubt_cold_resume_s"]
    for o in r.outcomes:
        assert o.added_latency_s == pytest.approx(doubt if o.in_doubt else clean, rel=1e-9)
        assert o.added_latency_s == pytest.approx(o.serial_s, rel=1e-9)


@pytest.mark.parametrize("discipline", ["fifo", "ps"])
def test_eager_resume_without_contention_finishes_each_session_at_its_serial_time(discipline):
    w, st_, _ = default_parts(sessions=200)
    r = simulate(w, st_, Pool(200 * 20000, 20000, discipline), POLICIES["eager_cold"])
    for o in r.outcomes:
        assert o.prefill_end_s == pytest.approx(o.serial_s, rel=1e-9)
        assert o.added_latency_s == pytest.approx(max(0.0, o.serial_s - o.message_at_s), abs=1e-12)


@pytest.mark.parametrize("discipline", ["fifo", "ps"])
@pytest.mark.parametrize("policy,closed", [("eager_cold", "eager_cold_drain_s"),
                                           ("eager_resident", "eager_resident_drain_s")])
def test_eager_drain_matches_the_closed_form(policy, closed, discipline):
    w, st_, pool = default_parts(discipline=discipline)
    r = simulate(w, st_, pool, POLICIES[policy])
    first_ready = min(o.prefill_ready_s for o in r.outcomes)
    # the pool is never idle once the first prefills are ready (the in-doubt ones join a long queue)
    assert r.drain_s - first_ready == pytest.approx(mod().solve()[closed], rel=1e-9)


def test_default_simulation_shares_over_the_bound():
    w, st_, pool = default_parts()
    s = mod().solve()
    runs = {name: simulate(w, st_, pool, pol) for name, pol in POLICIES.items()}
    lazy = runs["lazy_resident"]
    # load 0.512 with evenly spaced messages: no prefill ever waits, so the closed forms hold exactly
    assert lazy.max_s == pytest.approx(s["proposed_worst_added_latency_s"], rel=1e-9)
    assert lazy.mean_s == pytest.approx(s["proposed_mean_added_latency_s"], rel=1e-9)
    assert lazy.fraction_over(1.0) == 0.0
    assert all(o.prefill_start_s == pytest.approx(o.prefill_ready_s) for o in lazy.outcomes)
    assert lazy.prefill_load_fraction() == pytest.approx(s["proposed_prefill_load_fraction"])
    assert runs["warm_control"].fraction_over(1.0) == 0.0
    assert runs["warm_control"].quantile_s(0.5) == pytest.approx(2048 / 20000)
    # the eager policies and the cold on-demand one leave customers over the bound
    assert runs["eager_cold"].fraction_over(1.0) > 0.5
    assert 0.05 < runs["eager_resident"].fraction_over(1.0) < runs["eager_cold"].fraction_over(1.0)
    assert runs["lazy_cold"].fraction_over(1.0) > 0.9                 # load 2.05: the queue grows all window
    assert runs["eager_cold"].max_s <= s["candidates"]["eager_cold"]["worst_added_latency_s"] + EPS


def test_poisson_messages_and_processor_sharing_keep_the_proposed_policy_within_the_bound():
    for arrivals in ("even", "poisson"):
        for discipline in ("fifo", "ps"):
            runs = mod().simulate_policies(arrivals=arrivals, discipline=discipline, seed=5,
                                           policies=["lazy_resident", "eager_cold"])
            assert runs["lazy_resident"].fraction_over(1.0) == 0.0
            assert runs["eager_cold"].fraction_over(1.0) > 0.5


def test_policy_and_pool_validation():
    with pytest.raises(ConfigError):
        Policy("bad", control="on_demand", prefill="eager", prefix_resident=True)
    with pytest.raises(ConfigError):
        Pool(1000, 2000)
    with pytest.raises(ConfigError):
        Pool(4000, 2000, discipline="lifo")
    with pytest.raises(ConfigError):
        Workload(10, 100, 200, 20.0)
    with pytest.raises(ConfigError):
        Stages(-0.1, 0.0, 0.0)
    assert Pool(50000, 20000).slots == 2                           # a fractional slot is not used


# --- properties of the queue --------------------------------------------------------------------

jobs = st.lists(st.tuples(st.floats(0, 10, allow_nan=False), st.floats(1, 5000, allow_nan=False)),
                min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(jobs=jobs, slots=st.integers(1, 8), extra=st.integers(0, 8), rate=st.floats(100, 10000),
       speedup=st.floats(1, 4))
def test_fifo_more_capacity_never_delays_any_job(jobs, slots, extra, rate, speedup):
    ready = [j[0] for j in jobs]
    work = [j[1] for j in jobs]
    _, end = fifo_schedule(ready, work, slots, rate)
    _, end_more = fifo_schedule(ready, work, slots + extra, rate * speedup)
    for i in range(len(jobs)):
        assert end_more[i] <= end[i] * (1 + 1e-12) + 1e-12
        assert end[i] >= ready[i] + work[i] / rate - 1e-9           # no job beats its own service time


@settings(max_examples=100, deadline=None)
@given(jobs=jobs, pool=st.floats(100, 20000), cap=st.floats(100, 20000))
def test_ps_job_never_beats_its_cap_and_the_pool_never_beats_its_rate(jobs, pool, cap):
    pool = max(pool, cap)
    ready = [j[0] for j in jobs]
    work = [j[1] for j in jobs]
    end = ps_schedule(ready, work, pool, cap)
    for i in range(len(jobs)):
        assert end[i] >= ready[i] + work[i] / cap * (1 - 1e-9) - 1e-9
    assert max(end) >= min(ready) + sum(work) / pool * (1 - 1e-9) - 1e-9


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), ctx=st.integers(16, 4096), share=st.floats(0, 1), think=st.floats(0.1, 30),
       f=st.floats(0, 1), own=st.floats(0, 0.2), lookup=st.floats(0, 0.5), single=st.floats(1000, 50000),
       slots=st.integers(1, 10), more=st.integers(1, 10), arrivals=st.sampled_from(["even", "poisson"]),
       policy=st.sampled_from(sorted(POLICIES)), seed=st.integers(0, 1000))
def test_simulation_properties(n, ctx, share, think, f, own, lookup, single, slots, more, arrivals, policy, seed):
    w = Workload(n, ctx, int(ctx * share), think, f, arrivals=arrivals, seed=seed)
    stg = Stages(own, own / 2, own / 4, 0.0, lookup)
    pol = POLICIES[policy]
    base = simulate(w, stg, Pool(single * slots, single, "fifo"), pol)
    bigger = simulate(w, stg, Pool(single * (slots + more), single, "fifo"), pol)
    for a, b in zip(base.outcomes, bigger.outcomes):
        assert b.added_latency_s <= a.added_latency_s * (1 + 1e-12) + 1e-12     # more capacity never hurts
        # every session spends at least its serial stage sum from its first stage to the end of its prefill
        assert a.prefill_end_s - a.control_start_s >= a.serial_s * (1 - 1e-12) - 1e-12
        assert a.added_latency_s >= 0
        if pol.control == "on_demand":                    # then the customer waits the whole chain
            assert a.added_latency_s >= a.serial_s * (1 - 1e-12) - 1e-12
    ps = simulate(w, stg, Pool(single * slots, single, "ps"), pol)
    for o in ps.outcomes:
        assert o.prefill_end_s - o.control_start_s >= o.serial_s * (1 - 1e-12) - 1e-12


# --- notebooks and CLI ------------------------------------------------------------------------------


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
def test_solution_notebook_runs_simulates_and_passes_check(variant, tmp_path):
    params = mod().generate(variant) if variant is not None else None
    nb = _run(ROOT / "solutions" / "ex11_6.ipynb", tmp_path / "out.ipynb", params)
    n = len(mod().GRADED)
    assert f"{n} of {n} quantities answered, {n} correct" in _text(nb, "check")
    sim = _text(nb, "sim")
    assert "fraction_over_bound" in sim and all(name in sim for name in POLICIES)
    chart = next(c for c in nb.cells if c.get("id") == "chart")
    assert any("image/svg+xml" in o.get("data", {}) for o in chart.outputs)
    decision = _text(nb, "decision")
    assert "Decision" in decision and "over the bound" in decision and not re.search(r"\b(nan|inf)\b", decision)
    if variant is None:
        assert "0.0% of customers exceed" in decision and "lazy_resident" in decision


def test_exercise_notebook_runs_unanswered(tmp_path):
    nb = _run(ROOT / "exercises" / "ex11_6.ipynb", tmp_path / "out.ipynb")
    out = _text(nb, "check")
    assert f"0 of {len(mod().GRADED)} quantities answered" in out and " expected " not in out
    text = (ROOT / "exercises" / "ex11_6.ipynb").read_text()
    assert "simulate_policies" in text and "BEGIN SOLUTION" not in text


def test_cli_solve_and_check(tmp_path, capsys):
    assert main(["exercise", "solve", EX, "--json", "--param", "pool_prefill_tokens_per_s=160000"]) == 0
    assert json.loads(capsys.readouterr().out)["proposed_policy"] == "none"
    answers = graded_answers(None)
    f = tmp_path / "a.json"
    f.write_text(json.dumps(answers))
    assert main(["exercise", "check", EX, "--answers", str(f)]) == 0
    capsys.readouterr()
    f.write_text(json.dumps({**answers, "binding_term": "session_prefill_latency"}))
    assert main(["exercise", "check", EX, "--answers", str(f)]) == 1
    assert "NO " in capsys.readouterr().out
    assert main(["exercise", "solve", EX, "--param", "shared_prefix_tokens=9000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_closed_form_helpers_are_consistent():
    assert mod().resume_time_s(0.04, 8192, 20000) == pytest.approx(0.4496)
    assert mod().resume_time_s(0.04, 2048, 20000, reconciliation_s=0.15) == pytest.approx(0.2924)
    assert math.isclose(mod().stages(mod().validate_params()).control_s(True), 0.19)
