"""The watchdog over real agents' logs, beside the loop rules other runtimes ship (Failure
Recovery, "Semantic Watchdog Timers"; issue 18: "run it over every log in
../shared/data/trajectories/ ... the baselines above mostly miss all of this; the project must not").

Fault model: third-party agents that loop in the ways real agents do: SWE-agent re-submitting an
identical edit the linter refuses, a CTF run submitting the same wrong flag, tau-bench's airline
agent re-issuing a refused booking or update with look-ups and "think" calls in between, an agent
asking the customer the same thing again, a web surfer bouncing between the same two views.
Invariants: every reported position is a sequence number of the log; the detections keep the
watchdog's shape; on runs a reader would call clean (tau-bench, reward 1, no error observation)
the watchdog stays below a stated false-positive bound. Goal: the loops the data README names are
found by what they are (a repeated failing call, not a looked-up position), and the baselines'
misses are shown, not assumed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lib.importers import import_file
from kernel_lib.recovery.watchdog.baselines import gemini_detections, openhands_detections
from kernel_lib.recovery.watchdog.compare import compare_baselines
from kernel_lib.recovery.watchdog.detectors import run_watchdog
from kernel_lib.recovery.watchdog.steps import watch_steps

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "trajectories"    # ../shared/data, never copied
FOLDERS = {"swe-agent": ("swe-agent", "*.traj"), "tau-bench": ("tau-bench-airline", "*.json"),
           "who-and-when": ("who-and-when-handcrafted", "*.json")}
ROOT = Path(__file__).resolve().parents[1]

#: the share of clean runs on which the watchdog may fire at all (measured: 0 of 55)
CLEAN_FALSE_POSITIVE_BOUND = 0.05

#: the runs the data README names as repeating the same failing tool call
README_LOOPS = {"pydicom__pydicom-1458.traj": "edit", "ctf_crypto_eps.traj": "submit",
                "task08_trial1.json": "book_reservation", "task15_trial1.json": "update_reservation_flights",
                "task23_trial1.json": "update_reservation_flights", "task00_trial3.json": "book_reservation"}

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"{DATA} not present (real third-party logs)")


@pytest.fixture(scope="module")
def logs() -> dict[str, tuple[str, Path, list]]:
    out = {}
    for fmt, (folder, pattern) in FOLDERS.items():
        for p in sorted((DATA / folder).glob(pattern)):
            out[p.name] = (fmt, p, import_file(fmt, p).events)
    return out


@pytest.fixture(scope="module")
def comparison(logs):
    return compare_baselines([(name, events) for name, (_, _, events) in logs.items()])


def test_every_log_folds_into_steps_whose_positions_are_the_logs(logs):
    assert sum(1 for fmt, _, _ in logs.values() if fmt == "tau-bench") >= 100
    tau_kinds = set()
    for name, (fmt, _, events) in logs.items():
        seqs = {e.sequence_number for e in events}
        steps = watch_steps(events)
        assert steps, name
        for s in steps:
            assert s.position in seqs and (s.observation_position is None or s.observation_position in seqs), name
            assert s.observation_position is None or s.observation_position >= s.position
            assert s.state_source in (None, "log")        # no imported log records a workspace
        if fmt == "who-and-when":
            assert {s.kind for s in steps} == {"message"}
            surfer = [s for s in steps if s.actor == "WebSurfer" and s.mutative]
            assert all(s.arguments["text"].startswith("I ") and s.observation_position == s.position for s in surfer)
        if fmt == "tau-bench":
            assert "question" in {s.kind for s in steps}, name        # the agent talks to the customer
            tau_kinds |= {s.kind for s in steps}
    assert tau_kinds == {"tool", "question"}


def test_folding_a_growing_log_gives_the_steps_of_the_whole_fold_at_every_cut(logs):
    """A live watchdog folds each new event once (StepFold); at any point its steps must be what
    the one-pass fold of the same prefix gives, a pending reply included."""
    import random

    from kernel_lib.recovery.watchdog.steps import StepFold

    rng = random.Random(18)
    by_format: dict[str, list[str]] = {}
    for name in sorted(logs):
        by_format.setdefault(logs[name][0], []).append(name)
    for name in [n for names in by_format.values() for n in rng.sample(names, min(4, len(names)))]:
        events = logs[name][2]
        cuts = sorted(rng.sample(range(1, len(events)), min(6, len(events) - 1))) + [len(events)]
        fold, at = StepFold(), 0
        for cut in cuts:
            while at < cut:
                nxt = min(cut, at + rng.randint(1, 7))
                fold.add(events[max(0, at - 2):nxt])      # an overlap: already folded events are skipped
                at = nxt
            assert fold.steps() == watch_steps(events[:cut]), (name, cut)


def test_the_loops_the_data_readme_names_are_found_by_what_they_are(logs, comparison):
    by_name = {lg.name: lg for lg in comparison.logs}
    for name, tool in README_LOOPS.items():
        _, _, events = logs[name]
        steps = {s.position: s for s in watch_steps(events)}
        reps = [d for d in by_name[name].detections["watchdog"] if d.kind == "action_repetition"]
        assert reps, f"{name}: no repeated failing call found"
        for d in reps:
            again, before = steps[d.evidence["step_position"]], steps[d.evidence["repeat_of"]]
            assert again.tool == before.tool == tool and again.arguments == before.arguments, name
            assert before.observation_error, name
    edit = [d for d in by_name["pydicom__pydicom-1458.traj"].detections["watchdog"] if d.kind == "action_repetition"]
    assert "syntax error" in edit[0].evidence["error"] and edit[0].evidence["steps_between"] == 0
    flag = [d for d in by_name["ctf_crypto_eps.traj"].detections["watchdog"] if d.kind == "action_repetition"]
    assert len(flag) >= 2 and all(d.evidence["error"] == "Wrong flag!" for d in flag)
    booking = [d for d in by_name["task08_trial1.json"].detections["watchdog"] if d.kind == "action_repetition"]
    assert all(d.evidence["steps_between"] >= 1 for d in booking)        # a "think" call between each retry
    assert [d.tier for d in booking] == [1, 2]


def test_the_baselines_miss_the_interleaved_and_short_loops(comparison):
    by_name = {lg.name: lg for lg in comparison.logs}
    for name in ("task08_trial1.json", "task15_trial1.json", "task23_trial1.json", "task00_trial3.json",
                 "pydicom__pydicom-1458.traj"):
        lg = by_name[name]
        assert lg.detections["watchdog"], name
        assert not lg.detections["openhands"] and not lg.detections["gemini"], name
    ctf = by_name["ctf_crypto_eps.traj"]
    (oh,) = ctf.detections["openhands"]                   # 4 identical submits: OpenHands' 3-in-a-row rule fires
    assert oh.kind == "openhands.repeating_action_error" and oh.tier is None and oh.detector == "openhands"
    assert not ctf.detections["gemini"]                   # 4 in a row, Gemini needs 5
    (loop,) = ctf.loops
    assert loop["caught_by"]["watchdog"]["delay_steps"] < loop["caught_by"]["openhands"]["delay_steps"]


def test_repeated_questions_and_web_flip_flops_are_found(comparison):
    by_name = {lg.name: lg for lg in comparison.logs}
    asks = [d for d in by_name["task15_trial3.json"].detections["watchdog"] if d.kind == "repeated_question"]
    assert asks and "human agent" in asks[0].evidence["question"] and asks[0].evidence["times_asked"] >= 3
    surf = [d for d in by_name["011.json"].detections["watchdog"] if d.kind == "state_hash_cycle"]
    assert any(d.evidence["period"] == 2 and d.evidence["actor"] == "WebSurfer" for d in surf)


def test_clean_runs_stay_below_the_false_positive_bound(comparison):
    clean = [lg for lg in comparison.logs if lg.clean]
    assert len(clean) >= 20
    flagged = [lg.name for lg in clean if lg.detections["watchdog"]]
    assert len(flagged) / len(clean) <= CLEAN_FALSE_POSITIVE_BOUND, flagged
    s = comparison.summary()
    assert s["clean_runs"] == len(clean)
    assert s["detectors"]["watchdog"]["false_positive_rate"] == round(len(flagged) / len(clean), 4)
    assert all(lg.clean is None for lg in comparison.logs if lg.format != "tau-bench")


def test_the_summary_accounts_for_every_loop(comparison):
    s = comparison.summary()
    loops = [lp for lg in comparison.logs for lp in lg.loops]
    assert s["loops_total"] == len(loops)
    assert len(s["only_watchdog"]) + len(s["only_baselines"]) + len(s["both"]) == len(loops)
    for name, d in s["detectors"].items():
        caught = [lp["caught_by"][name]["delay_steps"] for lp in loops if name in lp["caught_by"]]
        assert d["loops_caught"] == len(caught) and all(x >= 0 for x in caught)
    assert s["detectors"]["watchdog"]["loops_caught"] > s["detectors"]["openhands"]["loops_caught"]
    assert s["detectors"]["watchdog"]["loops_caught"] > s["detectors"]["gemini"]["loops_caught"]


def test_detections_keep_the_shared_shape(logs):
    for name in ("ctf_crypto_eps.traj", "task08_trial1.json", "011.json"):
        _, _, events = logs[name]
        seqs = {e.sequence_number for e in events}
        steps = watch_steps(events)
        for d in run_watchdog(steps) + openhands_detections(steps) + gemini_detections(steps):
            assert d.position in seqs
            assert set(d.to_json()) == {"position", "kind", "evidence", "tier", "detector"}
            json.dumps(d.to_json())
            ev = d.evidence
            assert {"step_position", "occurrences", "first_repeat_position"} <= set(ev)
            assert set(ev["occurrences"]) <= {s.position for s in steps}
            assert (d.tier in (1, 2, 3)) == (d.detector == "watchdog")


# --- the command ------------------------------------------------------------------------------------------------


def _cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "kernel_lib", "watchdog", *argv], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_cli_json_over_a_foreign_file_recognised_or_named():
    path = DATA / "swe-agent" / "pydicom__pydicom-1458.traj"
    out = _cli(str(path), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["source"]["format"] == "swe-agent" and doc["state_source"] == "log" and doc["log_state_misses"]
    assert doc["detections"] and all(set(d) == {"position", "kind", "evidence", "tier"} for d in doc["detections"])
    assert doc["embedding"]["available"] in (True, False)
    tau = DATA / "tau-bench-airline" / "task08_trial1.json"
    named = json.loads(_cli("--import", "tau-bench", str(tau), "--json").stdout)
    assert [d["kind"] for d in named["detections"]].count("action_repetition") == 2
    base = json.loads(_cli(str(DATA / "swe-agent" / "ctf_crypto_eps.traj"), "--baseline", "openhands",
                           "--json").stdout)
    assert base["detector"] == "openhands" and [d["tier"] for d in base["detections"]] == [None]


def test_cli_errors_are_one_line_and_exit_2(tmp_path):
    missing = _cli(str(tmp_path / "nope.traj"))
    assert missing.returncode == 2 and missing.stderr.startswith("error: no such log")
    (tmp_path / "odd.json").write_text('{"a": 1}')
    odd = _cli(str(tmp_path / "odd.json"))
    assert odd.returncode == 2 and "--import" in odd.stderr and "Traceback" not in odd.stderr
    (tmp_path / "bad.json").write_text("{not json")
    bad = _cli("--import", "tau-bench", str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert _cli().returncode == 2
    usage = _cli("--baseline", "nobody", str(tmp_path / "odd.json"))
    assert usage.returncode == 2 and "invalid choice" in usage.stderr


def test_cli_loads_no_unrelated_layer():
    probe = ("import contextlib, io, sys\nfrom kernel_lib.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    code = main(['watchdog', {str(DATA / 'swe-agent' / 'ctf_crypto_eps.traj')!r}, '--json'])\n"
             "print(code, ' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    code, mods = out.stdout.split(" ", 1)
    assert code == "0", out.stderr
    loaded = {m.split(".")[0] for m in mods.split()} | {".".join(m.split(".")[:2]) for m in mods.split()}
    unrelated = {"sympy", "polars", "numpy", "scipy", "httpx", "kernel_lib.live", "kernel_lib.bench",
                 "kernel_lib.course", "kernel_lib.quorum", "kernel_lib.sim", "kernel_lib.cadence"}
    assert not loaded & unrelated, sorted(loaded & unrelated)
