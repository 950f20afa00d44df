"""The anti-spin report over real logs (Failure Recovery, "The anti-spin invariant"; issue 17:
"report the position where the bound would have stopped each").

Fault model: other harnesses' agents that resubmit the same failing call (SWE-agent's rejected
edit, tau-bench's refused booking) or keep producing new errors, recorded in formats that mark
errors differently or not at all, with the sub-transaction never declared. Invariant: for any log,
every reported position is inside the log and the source file; the bound never stops before the
second error of an episode; a repeat stop names an earlier error whose normalized (type, source,
signature) is the same; a budget stop comes after exactly K_repair repairs. Goal: the loops the
data README names are found (not looked up by position), and the report is a CLI command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lib.errors import RecoveryPolicyError
from kernel_lib.importers import import_file
from kernel_lib.recovery.spin_report import is_error_text, spin_report

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "trajectories"    # ../shared/data, never copied
FOLDERS = {"swe-agent": ("swe-agent", "*.traj"), "tau-bench": ("tau-bench-airline", "*.json"),
           "who-and-when": ("who-and-when-handcrafted", "*.json")}
ROOT = Path(__file__).resolve().parents[1]


def _files() -> list[tuple[str, Path]]:
    out = []
    for fmt, (folder, pattern) in FOLDERS.items():
        out.extend((fmt, p) for p in sorted((DATA / folder).glob(pattern)))
    return out


needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"{DATA} not present (real third-party logs)")


def _in_source(doc: dict, source_path: str, index: int) -> bool:
    """Whether ``source_path`` (``trajectory[7].observation``, ``traj[21]``) names list entry
    ``index`` of the source document."""
    name = source_path.split("[", 1)[0]
    return isinstance(doc.get(name), list) and 0 <= index < len(doc[name])


@pytest.fixture(scope="module")
def reports() -> dict[str, tuple[str, Path, list, object]]:
    if not DATA.is_dir():
        pytest.skip(f"{DATA} not present")
    out = {}
    for fmt, path in _files():
        events = import_file(fmt, path).events
        out[path.name] = (fmt, path, events, spin_report(events))
    return out


@needs_data
def test_every_file_of_every_format_is_read_and_the_positions_hold(reports):
    assert {fmt for fmt, *_ in reports.values()} == set(FOLDERS)
    for name, (_fmt, path, events, rep) in reports.items():
        seqs = {e.sequence_number for e in events}
        doc = json.loads(path.read_text())
        for g in rep.groups:
            assert [e.iteration for e in g.errors] == list(range(1, len(g.errors) + 1)), name
            assert [e.seq for e in g.errors] == sorted(e.seq for e in g.errors), name
            for e in g.errors:
                assert e.seq in seqs and e.source_index is not None, (name, e)
                assert _in_source(doc, e.source_path, e.source_index), (name, e)
            st = g.stop
            if st is None:
                continue
            assert st.at in g.errors and st.at.iteration >= 2, (name, st)       # never before the 2nd error
            if st.reason == "repeated_signature":
                m = st.matched
                assert m in g.errors and m.seq < st.at.seq and m.sigma == st.at.sigma, (name, st)
                assert m.normalized == st.at.normalized, name                   # σ equal because the texts are
                assert st.repairs_done == st.at.iteration - 1
            else:
                assert st.reason == "repair_budget_exhausted" and st.repairs_done == rep.k_repair
                assert st.at.iteration == rep.k_repair + 1
                assert len({e.sigma for e in g.errors[:st.at.iteration]}) == st.at.iteration


@needs_data
def test_pydicoms_repeated_failing_edit_is_stopped_at_its_repeat(reports):
    _fmt, path, _events, rep = reports["pydicom__pydicom-1458.traj"]
    steps = json.loads(path.read_text())["trajectory"]
    stops = [s for s in rep.stops if s.at.group.startswith("edit ")]
    assert len(stops) == 1
    st = stops[0]
    assert st.reason == "repeated_signature" and st.at.error_class == "semantic"
    assert steps[st.at.source_index]["observation"] == steps[st.matched.source_index]["observation"]
    assert steps[st.at.source_index]["action"].split()[0] == "edit"
    assert "syntax error" in steps[st.at.source_index]["observation"]


@needs_data
@pytest.mark.parametrize("name", ["task08_trial1.json", "task15_trial1.json", "task23_trial1.json"])
def test_tau_bench_trials_that_repeat_a_failing_call_are_stopped(reports, name):
    _fmt, path, _events, rep = reports[name]
    traj = json.loads(path.read_text())["traj"]
    repeats = [s for s in rep.stops if s.reason == "repeated_signature"]
    assert repeats, f"{name}: no repeated failing call found"
    for st in repeats:
        a, b = traj[st.at.source_index], traj[st.matched.source_index]
        assert a["role"] == b["role"] == "tool" and a["content"].startswith("Error:")
        assert a["content"] == b["content"] and a["name"] == b["name"] == st.at.group.split()[0]


@needs_data
def test_a_repeat_across_a_success_is_a_recurrence_not_a_stop(reports):
    """task00 trial 3 books, fails, books successfully, cancels and fails again with an earlier
    error: a new episode, so the bound does not fire, but the recurrence is reported."""
    _fmt, path, _events, rep = reports["task00_trial3.json"]
    rec = [r for r in rep.recurrences if r["group"].startswith("book_reservation")]
    assert rec and all(r["again"]["episode"] > r["first"]["episode"] for r in rec)
    traj = json.loads(path.read_text())["traj"]
    r = rec[0]
    assert traj[r["first"]["source_index"]]["content"] == traj[r["again"]["source_index"]]["content"]


@needs_data
def test_the_ctf_wrong_flag_resubmission_is_an_error_and_stopped(reports):
    _fmt, _path, _events, rep = reports["ctf_crypto_eps.traj"]
    st = next(s for s in rep.stops if s.at.group == "submit")
    assert (st.reason, st.at.iteration, st.matched.iteration) == ("repeated_signature", 2, 1)


def test_what_counts_as_an_error_text():
    assert is_error_text("Wrong flag!")
    assert is_error_text("bash: pytset: command not found")
    assert is_error_text('Traceback (most recent call last):\n  File "a.py", line 1\nKeyError: 1')
    assert not is_error_text("Script completed successfully, no errors.")
    assert not is_error_text("[File: /x.py (10 lines total)]\n1: raise ValueError('x')\n" + "2: pass\n" * 5)
    assert not is_error_text("")


def _tau_file(tmp_path: Path, results: list[str]) -> Path:
    traj: list[dict] = [{"role": "user", "content": "book it"}]
    for i, text in enumerate(results):
        traj.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                     "function": {"name": "book", "arguments": json.dumps({"user_id": "u1"})}}]})
        traj.append({"role": "tool", "tool_call_id": f"c{i}", "name": "book", "content": text})
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"task_id": 1, "trial": 0, "traj": traj}))
    return p


def test_a_success_starts_a_new_episode_and_k_repair_bounds_new_errors(tmp_path):
    errs = [f"Error: seat {i} taken" for i in range(5)]
    ev = import_file("tau-bench", _tau_file(tmp_path, errs[:2] + ["ok"] + errs[2:])).events
    rep = spin_report(ev, k_repair=2)
    assert [(g.group, g.episode, len(g.errors)) for g in rep.groups] == [("book user_id=u1", 1, 2),
                                                                         ("book user_id=u1", 2, 3)]
    assert rep.groups[0].stop is None
    st = rep.groups[1].stop
    assert (st.reason, st.at.iteration, st.repairs_done) == ("repair_budget_exhausted", 3, 2)


@pytest.mark.parametrize("k, w", [(0, 8), (4, 8), (3, 0)])
def test_bad_bounds_are_refused(k, w):
    with pytest.raises(RecoveryPolicyError):
        spin_report([], k_repair=k, window=w)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernel_lib", "recovery", "spin", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_cli_reports_stops_with_both_positions(tmp_path):
    path = _tau_file(tmp_path, ["Error: not enough seats", "Error: not enough seats"])
    run = _cli(str(path), "--import", "tau-bench", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    (stop,) = out["stops"]
    assert (stop["reason"], stop["source_path"], stop["matched"]["source_path"]) == ("repeated_signature",
                                                                                     "traj[4]", "traj[2]")
    assert stop["seq"] > stop["matched"]["seq"] and stop["error_class"] == "semantic"
    human = _cli(str(path), "--import", "tau-bench")
    assert human.returncode == 0 and "repeated_signature" in human.stdout


def test_the_cli_refuses_bad_input_with_one_line(tmp_path):
    path = _tau_file(tmp_path, ["Error: x"])
    for argv in ((str(path), "--import", "tau-bench", "--k-repair", "5"), (str(tmp_path / "nope.json"), "--import",
                                                                            "tau-bench")):
        run = _cli(*argv)
        assert run.returncode == 2 and run.stderr.startswith("error:") and "Traceback" not in run.stderr
