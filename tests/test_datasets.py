"""Recorded datasets stay what their generators produce."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kernel_lib.log import load_events
from kernel_lib.sim.worksheet import worksheet_events

ROOT = Path(__file__).resolve().parents[1]


def test_worksheet_example_file_matches_its_generator():
    recorded = load_events(str(ROOT / "datasets" / "worksheet_r18_example.jsonl"))
    assert [e.canonical for e in recorded] == [e.canonical for e in worksheet_events()]


def test_cli_reads_the_recorded_file_and_folds_it():
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "fold", "--json", "--position", "9", "--log",
                          str(ROOT / "datasets" / "worksheet_r18_example.jsonl")],
                         capture_output=True, text=True, check=True).stdout
    rec = json.loads(out)
    assert rec["in_doubt"] == ["test_r18"]
    assert rec["operations"]["test_r18"]["attempt_id"] == "attempt1"
    assert rec["budget"]["outstanding_reservations_usd"] > 0


def test_cli_reports_bad_logs_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event_type": "Nope"}\n')
    for args in (["fold", "--log", str(bad)], ["fold", "--log", str(tmp_path / "missing.jsonl")],
                 ["fold", "--position", "999"]):
        p = subprocess.run([sys.executable, "-m", "kernel_lib", *args], capture_output=True, text=True)
        assert p.returncode == 2 and p.stderr.startswith("error:") and "Traceback" not in p.stderr, p.stderr
