"""A LANL failure file whose node columns are empty (issue 14).

Fault model: a LANL-format file (the real system-20 records, copied to a temporary folder) whose
``nodenum`` and ``nodenumz`` cells are all blank, or blank on some rows, or whose node columns are
absent. Invariant: the system-level figures (interrupt count, MTBF, inter-arrival gaps, the
whole-system cadence) depend only on the system and start times, so they equal the ones computed
from the original file. Goal: node-level analysis is skipped (or restricted to rows with a node)
with a note saying so, in Python and from the CLI, instead of "no usable failure rows".
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lib.cadence.lanl import analyze_lanl, arrival_times_s, gaps_s, load_lanl

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "failures" / "lanl" / "system20.csv"
pytestmark = pytest.mark.skipif(not SOURCE.is_file(), reason=f"needs {SOURCE}")
NODE_COLUMNS = ("nodenum", "nodenumz")


def _rewrite(tmp_path: Path, *, blank_every: int = 1, drop: bool = False) -> Path:
    with open(SOURCE, newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    idx = [i for i, h in enumerate(header) if h.strip().lower() in NODE_COLUMNS]
    assert len(idx) == 2, header
    out_rows = []
    for k, r in enumerate(rows):
        r = list(r)
        if k and k % blank_every == 0:
            for i in idx:
                if i < len(r):
                    r[i] = ""
        if drop:
            r = [v for i, v in enumerate(r) if i not in idx]
        out_rows.append(r)
    out = tmp_path / "system20_no_nodes.csv"
    with open(out, "w", newline="") as fh:
        csv.writer(fh).writerows(out_rows)
    return out


def _system_figures(a):
    s = a.systems[0]
    return (s.system, s.stats.failures, s.stats.mtbf_s, s.stats.median_gap_s, s.stats.cv,
            s.cadence_system.young_interval_s if s.cadence_system else None,
            s.cadence_system.replay_overhead_at_young if s.cadence_system else None)


@pytest.fixture(scope="module")
def original():
    return analyze_lanl(SOURCE, bootstrap=49)


@pytest.mark.parametrize("drop", [False, True], ids=["blank-cells", "columns-absent"])
def test_empty_node_columns_keep_the_system_figures_and_skip_node_level(tmp_path, original, drop):
    path = _rewrite(tmp_path, drop=drop)
    rec = load_lanl(path)
    assert not rec.node_level and rec.node_column is None and rec.rows_without_node == rec.frame.height
    assert not rec.skipped, rec.skipped[:3]
    assert gaps_s(arrival_times_s(rec)) == gaps_s(arrival_times_s(load_lanl(SOURCE)))
    a = analyze_lanl(path, bootstrap=49)
    assert _system_figures(a) == _system_figures(original)
    s = a.systems[0]
    assert a.per_node.height == 0 and s.nodes_with_failures == 0 and s.cadence_node is None
    assert any("node-level analysis skipped" in n for n in a.notes)
    assert a.to_dict()["notes"] == list(a.notes) and a.to_dict()["load"]["node_level"] is False


def test_some_rows_without_a_node_count_at_system_level_only(tmp_path, original):
    path = _rewrite(tmp_path, blank_every=3)
    a = analyze_lanl(path, bootstrap=49)
    assert _system_figures(a) == _system_figures(original)
    rec = load_lanl(path)
    assert rec.node_level and 0 < rec.rows_without_node < rec.frame.height
    assert a.per_node["failures"].sum() < original.per_node["failures"].sum()
    assert any("name no node" in n for n in a.notes)


def test_a_node_that_is_given_but_not_a_number_is_still_malformed(tmp_path):
    text = SOURCE.read_text().splitlines()
    header = text[0].split(",")
    j = [i for i, h in enumerate(header) if h.strip().lower() == "nodenumz"][0]
    cells = text[1].split(",")
    cells[j] = "seven"
    (tmp_path / "bad.csv").write_text("\n".join([text[0], ",".join(cells)] + text[2:]) + "\n")
    rec = load_lanl(tmp_path / "bad.csv")
    assert [s.reason for s in rec.skipped] == ["node number seven is not an integer"]


def test_the_cli_reports_the_system_figures_and_the_note(tmp_path, original):
    path = _rewrite(tmp_path)
    run = subprocess.run([sys.executable, "-m", "kernel_lib", "cadence", "lanl", "--path", str(path), "--bootstrap",
                          "49"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "node-level analysis skipped" in run.stdout and "most-failing nodes" not in run.stdout
    run = subprocess.run([sys.executable, "-m", "kernel_lib", "cadence", "lanl", "--path", str(path), "--bootstrap",
                          "49", "--json"], capture_output=True, text=True, timeout=300)
    doc = json.loads(run.stdout)
    assert doc["systems"][0]["arrivals"]["mtbf_s"] == original.systems[0].stats.mtbf_s
    assert doc["per_node"] == [] and doc["notes"]
