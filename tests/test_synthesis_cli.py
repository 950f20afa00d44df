"""``python -m kernel_lib scorecard`` and ``bench scorecard``: the JSON shape the checks read, the
human table, exit codes, and ``--live`` delegated to the worker fleet."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from kernel_lib.cli import main

NAMES = ("unmanaged", "wal_only", "saga_only", "synthesized")


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernel_lib", *argv], capture_output=True, text=True, timeout=300)


def test_scorecard_json_has_the_keys_the_checks_read():
    r = _run("scorecard", "--trajectories", "12", "--seed", "0", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in (*NAMES, "configurations", "seed", "trajectories", "profile", "semantics"):
        assert key in doc, key
    assert doc["seed"] == 0 and doc["trajectories"] == 12
    assert [c["name"] for c in doc["configurations"]] == list(NAMES)
    for name in NAMES:
        row = doc[name]
        assert row == next(c for c in doc["configurations"] if c["name"] == name)
        for key in ("completion_rate", "duplicated_effects", "leaked_resources", "rpo_turns", "rto_s", "mttr_s"):
            assert key in row, (name, key)
        assert isinstance(row["rpo_turns"], (int, float))
        assert isinstance(row["rto_s"], (int, float)) or "rto_note" in row
        assert isinstance(row["mttr_s"], (int, float)) or "mttr_note" in row
    assert doc["unmanaged"]["rpo_kind"] == "total_loss" and "rpo_kind" not in doc["synthesized"]


def test_scorecard_prints_a_table_without_json(capsys):
    assert main(["scorecard", "--trajectories", "6", "--seed", "4", "--config", "synthesized",
                 "--config", "unmanaged"]) == 0
    out = capsys.readouterr().out
    assert "configuration" in out and "synthesized" in out and "unmanaged" in out and "saga_only" not in out
    assert "virtual" in out and "measured" in out


@pytest.mark.parametrize("argv", [["--trajectories", "0"], ["--turns", "5"], ["--drop", "2"],
                                  ["--drop", "0.9", "--exception", "0.5"], ["--config", "chaos"]])
def test_scorecard_bad_input_exits_2_with_one_error_line(argv):
    r = _run("scorecard", *argv)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "error" in r.stderr


def test_scorecard_exits_1_when_the_synthesized_runtime_breaks_a_guarantee(monkeypatch, capsys):
    import kernel_lib.sim.scorecard as sc

    real = sc.run_scorecard

    def broken(**kw):
        doc = real(**kw)
        doc["synthesized"]["duplicated_effects"] = 1
        return doc
    monkeypatch.setattr(sc, "run_scorecard", broken)
    assert main(["scorecard", "--trajectories", "3", "--config", "synthesized", "--json"]) == 1
    capsys.readouterr()


def test_live_without_the_fleet_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "kernel_lib.live.fleet", None)
    assert main(["scorecard", "--live", "--trajectories", "2"]) == 2
    assert "kernel_lib.live.fleet" in capsys.readouterr().err


def test_live_is_delegated_to_the_fleet(monkeypatch, capsys):
    seen = {}

    def live_scorecard(**kw):
        seen.update(kw)
        return {"synthesized": {"completion_rate": 1.0}, "trajectories": kw["trajectories"], "services": "live"}
    monkeypatch.setitem(sys.modules, "kernel_lib.live.fleet", types.SimpleNamespace(live_scorecard=live_scorecard))
    assert main(["scorecard", "--live", "--trajectories", "4", "--seed", "9", "--json"]) == 0
    assert {k: seen[k] for k in ("trajectories", "seed", "turns")} == {"trajectories": 4, "seed": 9, "turns": 6}
    assert json.loads(capsys.readouterr().out)["services"] == "live"


def _fake_fleet(monkeypatch, seen: dict, **row):
    def live_scorecard(**kw):
        seen.update(kw)
        return {"synthesized": {"completion_rate": 1.0, **row}, "trajectories": kw["trajectories"], "services": "live"}
    monkeypatch.setitem(sys.modules, "kernel_lib.live.fleet", types.SimpleNamespace(live_scorecard=live_scorecard))


def test_live_exits_1_when_the_synthesized_runtime_breaks_a_guarantee(monkeypatch, capsys):
    _fake_fleet(monkeypatch, {}, duplicated_effects=1)
    assert main(["scorecard", "--live", "--trajectories", "2", "--json"]) == 1
    capsys.readouterr()


def test_scorecard_text_names_faults_in_words_and_explains_its_columns(capsys):
    assert main(["scorecard", "--trajectories", "4", "--seed", "1", "--config", "synthesized"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "faults network_drop" in out       # no Python dict in a reader's table
    assert "dup = " in out and "inv = " in out and "unsafe = " in out


def test_bench_scorecard_measures_every_configuration_against_the_unmanaged_baseline():
    r = _run("bench", "scorecard", "--trajectories", "4", "--rounds", "1", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["benchmark"] == "scorecard" and set(doc["configurations"]) == set(NAMES)
    assert doc["configurations"]["unmanaged"]["per_trajectory_over_unmanaged"] == pytest.approx(1.0)
    assert all(c["trajectories_per_s"] > 0 for c in doc["configurations"].values())
    assert doc["floor"]["draws"] > 0 and len(doc["targets"]) == 2
    assert all({"name", "measured", "limit", "passed"} <= set(t) for t in doc["targets"])
    assert _run("bench", "scorecard", "--trajectories", "0").returncode == 2


def test_live_passes_the_chosen_configurations_and_fault_profile_to_the_fleet(monkeypatch, capsys):
    """Adversarial review: `scorecard --live --config X --drop P` ran the default configurations and
    profile (the options were silently dropped), and the live sample defaulted to 1000 trajectories."""
    seen = {}

    def live_scorecard(**kw):
        seen.update(kw)
        return {"services": "live"}
    monkeypatch.setitem(sys.modules, "kernel_lib.live.fleet", types.SimpleNamespace(live_scorecard=live_scorecard))
    assert main(["scorecard", "--live", "--config", "synthesized", "--drop", "0.3", "--kill", "0.1", "--json"]) == 0
    capsys.readouterr()
    assert seen["configs"] == ["synthesized"] and seen["trajectories"] == 20
    p = seen["profile"]
    assert (p.network_drop, p.process_kill, p.tool_exception, p.format_corruption) == (0.3, 0.1, 0.06, 0.02)
    seen.clear()
    assert main(["scorecard", "--live", "--json"]) == 0
    capsys.readouterr()
    assert "configs" not in seen and "profile" not in seen and seen["trajectories"] == 20
